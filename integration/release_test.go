package integration

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// releaseEnv is a three-server cluster with storage "hostdir": one
// controller-only node and worker nodes with node plugins, sharing a root.
type releaseEnv struct {
	c          *harness.Cluster
	api        *api.Client
	root       string
	controller *harness.TestPlugin
	ctrlClient *harness.TestClient
	nodes      map[string]*harness.TestPlugin
	clients    map[string]*harness.TestClient
}

func newReleaseEnv(t *testing.T, workers ...string) *releaseEnv {
	t.Helper()
	return newReleaseEnvWith(t, nil, workers...)
}

// newReleaseEnvWith is newReleaseEnv with edit applied to every worker's
// node plugin before it starts (a volume limit, say).
func newReleaseEnvWith(t *testing.T, edit func(*harness.TestPlugin), workers ...string) *releaseEnv {
	t.Helper()
	return newReleaseEnvOpts(t, harness.Options{}, edit, workers...)
}

// newReleaseEnvOpts is newReleaseEnvWith on a cluster made with opts.
func newReleaseEnvOpts(t *testing.T, opts harness.Options, edit func(*harness.TestPlugin), workers ...string) *releaseEnv {
	t.Helper()
	c := harness.NewCluster(t, 3, opts)
	c.StartAll()
	c.WaitForLeader(electionWait)
	e := &releaseEnv{c: c, root: filepath.Join(t.TempDir(), "storage"),
		nodes: map[string]*harness.TestPlugin{}, clients: map[string]*harness.TestClient{}}
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.Addr)
	}
	e.api = c.Servers[0].Client()
	// Node plugins first: a controller publishes only to nodes that
	// registered under the shared root.
	for i, w := range workers {
		var edits []func(*harness.TestPlugin)
		if edit != nil {
			edits = append(edits, edit)
		}
		p := harness.StartPlugin(t, w, hostdir.ModeNode, e.root, edits...)
		e.nodes[w] = p
		// Spread the workers over the servers, so node calls must often be
		// forwarded to the server holding the node's session.
		order := append(append([]string{}, addrs[i%3:]...), addrs[:i%3]...)
		e.clients[w] = c.StartClient(w, order, p.Config())
	}
	e.controller = harness.StartPlugin(t, "ctrl", hostdir.ModeController, e.root)
	e.ctrlClient = c.StartClient("ctrl", []string{addrs[2], addrs[1], addrs[0]}, e.controller.Config())
	e.ctrlClient.AdmitControllers()
	waitHostdirHealthy(t, e.api, len(workers), 1)
	return e
}

func (e *releaseEnv) register(t *testing.T, id string, mode structs.AccessMode) {
	t.Helper()
	v := testVolume(id)
	v.AccessMode = mode
	if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), v); err != nil {
		t.Fatal(err)
	}
}

func (e *releaseEnv) run(t *testing.T, allocID, worker string, vols ...string) {
	t.Helper()
	a := &structs.Alloc{ID: allocID, NodeID: e.clients[worker].NodeID()}
	for _, v := range vols {
		id, ro := strings.CutSuffix(v, ":ro")
		a.Volumes = append(a.Volumes, &structs.AllocVolumeRequest{VolumeID: id, ReadOnly: ro})
	}
	if _, err := e.api.PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
}

func (e *releaseEnv) waitAlloc(t *testing.T, allocID string, want structs.AllocClientStatus) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), allocID, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != want {
			return fmt.Errorf("alloc %s client status exp: %s got: %s (%s)", allocID, want, a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
}

// waitFreed polls until the volume has no claims and no pending eval.
func (e *releaseEnv) waitFreed(t *testing.T, vol string, timeout time.Duration) {
	t.Helper()
	harness.WaitFor(t, timeout, func() error {
		ctx := harness.Ctx(t, 10*time.Second)
		v, _, err := e.api.Volume(ctx, vol, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n := len(v.PastClaims) + len(v.ReadClaims) + len(v.WriteClaims); n > 0 {
			return fmt.Errorf("volume %s claims exp: 0 got: %d (past %v)", vol, n, v.PastClaims)
		}
		evals, _, err := e.api.Evals(ctx, structs.EvalStatusPending, vol, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(evals) > 0 {
			return fmt.Errorf("pending evals exp: 0 got: %d", len(evals))
		}
		return nil
	})
}

// auditAll merges every plugin's audit log in time order.
func (e *releaseEnv) auditAll() []hostdir.AuditEntry {
	var all []hostdir.AuditEntry
	for _, p := range e.nodes {
		all = append(all, p.Audit()...)
	}
	all = append(all, e.controller.Audit()...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	return all
}

// checkDetachOrder asserts S3 from the plugins' own records: every
// ControllerUnpublish of a volume from a node comes after a successful
// NodeUnpublish and NodeUnstage of that volume on that node.
func checkDetachOrder(t *testing.T, entries []hostdir.AuditEntry, nodeExt map[string]string) {
	t.Helper()
	type key struct{ vol, node string }
	unpublished, unstaged := map[key]bool{}, map[key]bool{}
	for _, en := range entries {
		if en.Result != "ok" {
			continue
		}
		k := key{en.Volume, en.Node}
		switch en.Method {
		case "NodeUnpublishVolume":
			unpublished[k] = true
		case "NodeUnstageVolume":
			unstaged[k] = true
		case "NodePublishVolume", "NodeStageVolume":
			// A new mount on the node starts a new cycle.
			unpublished[k], unstaged[k] = false, false
		case "ControllerUnpublishVolume":
			if !unpublished[k] || !unstaged[k] {
				t.Fatalf("S3: ControllerUnpublish of %s from %s at %s exp: after NodeUnpublish and NodeUnstage got: unpublished=%v unstaged=%v",
					en.Volume, en.Node, en.Time.Format(time.RFC3339Nano), unpublished[k], unstaged[k])
			}
		}
	}
}

// countCalls counts a plugin's calls for a volume (by its external ID);
// result "ok" counts successes, "" counts all.
func countCalls(entries []hostdir.AuditEntry, method, vol, result string) int {
	n := 0
	for _, en := range entries {
		if en.Method == method && en.Volume == vol && (result == "" || en.Result == result) {
			n++
		}
	}
	return n
}

// The seed scenario (seed 2 in docs/architecture.md): allocations stop while
// their node plugin is missing; the release waits and retries without
// blocking the system GC, and finishes by itself once the plugin is back —
// node detach strictly before controller detach.
func TestRelease_SeedScenario_PluginMissingThenBack(t *testing.T) {
	// w1's own unmounts at the stop can only fail (its plugin is gone):
	// ownDetachWindow each, not 10 s.
	e := newReleaseEnvOpts(t, harness.Options{ConfigureClient: shortOwnDetach}, nil, "w1", "w2")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.register(t, "v2", structs.AccessModeSingleNodeWriter)
	e.register(t, "v3", structs.AccessModeMultiNodeReader)
	e.run(t, "a1", "w1", "v1", "v3:ro")
	e.run(t, "a2", "w2", "v2")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	e.waitAlloc(t, "a2", structs.AllocClientRunning)

	// The node plugin of w1 goes away; then both allocations stop.
	e.nodes["w1"].Stop()
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1", "a2"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "a1", structs.AllocClientComplete)
	e.waitAlloc(t, "a2", structs.AllocClientComplete)

	// w2's volume is released; w1's wait, retrying with backoff.
	e.waitFreed(t, "v2", 30*time.Second)
	harness.WaitFor(t, 30*time.Second, func() error {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if st["v1"].Attempts < 2 {
			return fmt.Errorf("v1 release attempts exp: >= 2 got: %+v", st["v1"])
		}
		return nil
	})
	for _, v := range []string{"v1", "v3"} {
		evals, _, err := e.api.Evals(harness.Ctx(t, 10*time.Second), structs.EvalStatusPending, v, structs.QueryOptions{})
		if err != nil || len(evals) != 1 {
			t.Fatalf("%s pending evals while the node plugin is missing exp: 1 got: %v %v", v, evals, err)
		}
	}
	if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-v1", ""); n != 0 {
		t.Fatalf("S3: controller unpublish of v1 while its node plugin is missing exp: 0 got: %d", n)
	}
	// The system GC completes at once; it does not wait for stuck releases.
	if _, err := e.api.SystemGC(harness.Ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("system gc exp: completes got: %v", err)
	}

	// The plugin comes back: everything finishes by itself.
	e.nodes["w1"].Start()
	e.waitFreed(t, "v1", 30*time.Second)
	e.waitFreed(t, "v3", 30*time.Second)
	checkDetachOrder(t, e.auditAll(), nil)
	for _, v := range []string{"v1", "v2"} {
		if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-"+v, "ok"); n < 1 {
			t.Fatalf("controller unpublish of %s exp: >= 1 got: %d", v, n)
		}
	}
}

func (e *releaseEnv) claimOf(t *testing.T, vol, alloc string) *structs.Claim {
	t.Helper()
	v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), vol, structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v.Claim(alloc)
}

func (e *releaseEnv) waitClaimState(t *testing.T, vol, alloc string, want structs.ClaimState) *structs.Claim {
	t.Helper()
	var c *structs.Claim
	harness.WaitFor(t, 30*time.Second, func() error {
		if c = e.claimOf(t, vol, alloc); c == nil || c.State != want {
			return fmt.Errorf("claim %s/%s state exp: %s got: %v", vol, alloc, want, c)
		}
		return nil
	})
	return c
}

// Seed 6: a node detach that finds nothing mounted — the plugin answers
// "umount: ...: no mount point" — is a success, not an error that blocks GC.
func TestRelease_NodeDetachWithNothingMountedSucceeds(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	msg := "Could not unmount: umount: /csi/per-alloc/a1/v1/rw-file-system-single-node-writer: no mount point"
	e.nodes["w1"].SetControl(hostdir.Control{
		Fail:        map[string]int{"NodeUnpublishVolume": 100, "NodeUnstageVolume": 100},
		FailCode:    map[string]string{"NodeUnpublishVolume": "Internal", "NodeUnstageVolume": "Internal"},
		FailMessage: map[string]string{"NodeUnpublishVolume": msg, "NodeUnstageVolume": "umount: staging: not mounted"},
	})
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitFreed(t, "v1", 30*time.Second)
	audit := e.nodes["w1"].Audit()
	if n := countCalls(audit, "NodeUnpublishVolume", "ext-v1", ""); n != 1 {
		t.Fatalf("NodeUnpublish calls exp: 1 (answered 'no mount point', counted done) got: %d", n)
	}
	if st, _ := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second)); st["v1"].Attempts != 0 {
		t.Fatalf("release retries exp: 0 got: %+v", st["v1"])
	}
}

// A new leader resumes a release from its last checkpoint: the node step,
// done before the old leader died, is not repeated.
func TestRelease_LeaderKilledAfterNodeDetachResumesWithoutRepeatingIt(t *testing.T) {
	e := newReleaseEnvOpts(t, harness.Options{Configure: shortStorageLease}, nil, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	// Hold the release between the node step and the controller step.
	e.controller.SetControl(hostdir.Control{Fail: map[string]int{"ControllerUnpublishVolume": 1000}})
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitClaimState(t, "v1", "a1", structs.ClaimStateNodeDetached)
	old := e.c.WaitForLeader(electionWait)
	old.Stop()
	e.c.WaitForLeader(electionWait)
	e.controller.SetControl(hostdir.Control{Seq: 1})
	var running *harness.TestServer
	for _, s := range e.c.Servers {
		if s.Running() {
			running = s
		}
	}
	e.api = running.Client()
	e.waitFreed(t, "v1", 30*time.Second)
	audit := e.auditAll()
	checkDetachOrder(t, audit, nil)
	if n := countCalls(audit, "NodeUnpublishVolume", "ext-v1", "ok"); n != 1 {
		t.Fatalf("NodeUnpublish calls across the leader change exp: 1 got: %d", n)
	}
	if n := countCalls(audit, "ControllerUnpublishVolume", "ext-v1", "ok"); n < 1 {
		t.Fatalf("ControllerUnpublish after the leader change exp: >= 1 got: %d", n)
	}
}

// S6 and the system's reason to exist: a second writer of a single-node
// volume gets it only after the first writer's controller detach, and the
// plugin never has it attached to two nodes.
func TestRelease_SecondWriterWaitsForControllerDetach(t *testing.T) {
	e := newReleaseEnv(t, "w1", "w2")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	// Slow the first writer's release down so the second writer must wait.
	e.controller.SetControl(hostdir.Control{Fail: map[string]int{"ControllerUnpublishVolume": 3}})
	e.run(t, "a2", "w2", "v1")
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "a2", structs.AllocClientRunning)

	attached := map[string]bool{}
	var order []string
	for _, en := range e.controller.Audit() {
		if en.Volume != "ext-v1" || en.Result != "ok" {
			continue
		}
		switch en.Method {
		case "ControllerPublishVolume":
			attached[en.Node] = true
			order = append(order, "publish "+en.Node)
		case "ControllerUnpublishVolume":
			delete(attached, en.Node)
			order = append(order, "unpublish "+en.Node)
		}
		if len(attached) > 1 {
			t.Fatalf("single-node-writer volume attached to %d nodes at once: %v", len(attached), order)
		}
	}
	want := []string{"publish ext-w1", "unpublish ext-w1", "publish ext-w2"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("controller calls exp: %v got: %v", want, order)
	}
	checkDetachOrder(t, e.auditAll(), nil)
}

// A down node's claims wait for it; `volume detach -force` releases them,
// skipping the node step (recorded on the claim); the node coming back does
// not resurrect them.
func TestRelease_DownNodeClaimsWaitUntilForced(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	node := e.clients["w1"].NodeID()

	e.clients["w1"].Stop() // no more heartbeats
	e.waitAlloc(t, "a1", structs.AllocClientLost)
	harness.WaitFor(t, 30*time.Second, func() error {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if st["v1"].Attempts < 2 {
			return fmt.Errorf("release of a down node's claim exp: waiting with retries got: %+v", st["v1"])
		}
		return nil
	})
	if c := e.claimOf(t, "v1", "a1"); c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("claim of a down node exp: still unpublishing got: %v", c)
	}
	if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-v1", ""); n != 0 {
		t.Fatalf("controller unpublish while the node may still have it mounted exp: 0 got: %d", n)
	}

	// A plain detach cannot add anything to the release under way: it says
	// what the release waits for and which command ends the wait.
	_, err := e.api.DetachVolume(harness.Ctx(t, 30*time.Second), "v1", node, false)
	if err == nil || !strings.Contains(err.Error(), "already under way") || !strings.Contains(err.Error(), "is down") ||
		!strings.Contains(err.Error(), "volume detach -force v1 "+node) {
		t.Fatalf("plain detach on a down node exp: the release under way and the -force command got: %v", err)
	}

	// The operator declares the node gone for good. Hold the controller
	// step briefly so the recorded skip can be seen on the claim.
	e.controller.SetControl(hostdir.Control{Fail: map[string]int{"ControllerUnpublishVolume": 1000}})
	resp, err := e.api.DetachVolume(harness.Ctx(t, 30*time.Second), "v1", node, true)
	if err != nil || len(resp.Forced) != 1 {
		t.Fatalf("volume detach -force exp: one forced claim got: %+v %v", resp, err)
	}
	c := e.waitClaimState(t, "v1", "a1", structs.ClaimStateNodeDetached)
	if !c.NodeDetachSkipped || !c.ForcedSkip {
		t.Fatalf("forced claim exp: skip recorded got: %+v", c)
	}
	e.controller.SetControl(hostdir.Control{Seq: 1})
	e.waitFreed(t, "v1", 30*time.Second)

	// The node comes back: its allocation stays lost and claims nothing.
	e.clients["w1"].Start()
	harness.WaitFor(t, 30*time.Second, func() error {
		n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), node, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.Status != structs.NodeStatusReady {
			return fmt.Errorf("node status exp: ready got: %s", n.Status)
		}
		return nil
	})
	e.waitAlloc(t, "a1", structs.AllocClientLost)
	if c := e.claimOf(t, "v1", "a1"); c != nil {
		t.Fatalf("claim after the node came back exp: none got: %v", c)
	}
}

// A volume deregistered while its eval is pending: the eval ends and the
// leader stops retrying it (no hot loop).
func TestRelease_VolumeDeregisteredWhileEvalPending(t *testing.T) {
	// w1's own unmount at the stop can only fail: ownDetachWindow.
	e := newReleaseEnvOpts(t, harness.Options{ConfigureClient: shortOwnDetach}, nil, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	e.nodes["w1"].Stop()
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if st["v1"].Attempts < 1 {
			return fmt.Errorf("release of v1 exp: retrying got: %+v", st["v1"])
		}
		return nil
	})
	if _, err := e.api.DeregisterVolumes(harness.Ctx(t, 30*time.Second), true, "v1"); err != nil {
		t.Fatalf("deregister -force of a volume whose allocs are terminal: %v", err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		ctx := harness.Ctx(t, 10*time.Second)
		evals, _, err := e.api.Evals(ctx, "", "v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		for _, ev := range evals {
			if ev.Status == structs.EvalStatusPending {
				return fmt.Errorf("eval %s exp: ended got: pending", ev.ID)
			}
		}
		st, err := e.api.ReleaseStatus(ctx)
		if err != nil {
			return err
		}
		if _, ok := st["v1"]; ok {
			return fmt.Errorf("release retries for a deregistered volume exp: none got: %+v", st["v1"])
		}
		return nil
	})
	// And they stay stopped: the watcher does not pick the volume up again.
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := st["v1"]; ok {
			t.Fatalf("deregistered volume exp: no more retries got: %+v", st["v1"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A plugin gone for good (no node runs it any more) is a permanent error:
// the eval fails with the reason instead of retrying forever.
func TestRelease_PluginGoneForGoodFailsTheEval(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	// Every node that runs the plugin leaves the cluster for good.
	e.clients["w1"].Stop()
	e.ctrlClient.Stop()
	ids := []string{e.clients["w1"].NodeIDOffline(), e.ctrlClient.NodeIDOffline()}
	if _, err := e.api.DeregisterNodes(harness.Ctx(t, 30*time.Second), ids...); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		evals, _, err := e.api.Evals(harness.Ctx(t, 10*time.Second), "", "v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		for _, ev := range evals {
			if ev.Status == structs.EvalStatusFailed && strings.Contains(ev.StatusDescription, "no instances") {
				return nil
			}
		}
		return fmt.Errorf("evals exp: one failed naming the missing plugin got: %+v", evals)
	})
}
