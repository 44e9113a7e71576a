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
	c := harness.NewCluster(t, 3, harness.Options{})
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
		p := harness.StartPlugin(t, w, hostdir.ModeNode, e.root)
		e.nodes[w] = p
		// Spread the workers over the servers, so node calls must often be
		// forwarded to the server holding the node's session.
		order := append(append([]string{}, addrs[i%3:]...), addrs[:i%3]...)
		e.clients[w] = c.StartClient(w, order, p.Config())
	}
	e.controller = harness.StartPlugin(t, "ctrl", hostdir.ModeController, e.root)
	e.ctrlClient = c.StartClient("ctrl", []string{addrs[2], addrs[1], addrs[0]}, e.controller.Config())
	harness.WaitFor(t, applyWait, func() error {
		p, _, err := e.api.Plugin(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.NodesHealthy != len(workers) || p.ControllersHealthy != 1 || !p.ControllerRequired {
			return fmt.Errorf("plugin exp: %d healthy nodes, 1 healthy controller, controller required got: %+v", len(workers), p)
		}
		return nil
	})
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

// The seed scenario (DESIGN seed 2): allocations stop while their node
// plugin is missing; the release waits and retries without blocking the
// system GC, and finishes by itself once the plugin is back — node detach
// strictly before controller detach.
func TestRelease_SeedScenario_PluginMissingThenBack(t *testing.T) {
	e := newReleaseEnv(t, "w1", "w2")
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
