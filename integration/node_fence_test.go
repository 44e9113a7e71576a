package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// Node loss with a lease (issue 26, decision 39), in process: w1 holds a
// 3 s lease and is cut off from every server while a real process writes
// through its mount of a fence-policy volume. The agent runs the fence
// command (which kills the writer), unmounts, and records the fence; the
// servers, once the lease has certainly run out, skip the node detach and
// run the controller detach; w2 takes the volume. A wait-policy volume on
// the same node does not move until the node is back.

const fenceLease = 3 * time.Second

type fenceEnv struct {
	*releaseEnv
	hookLog string
	pidDir  string
}

func newFenceEnv(t *testing.T, clockRate float64) *fenceEnv {
	t.Helper()
	return newFenceEnvOpts(t, fenceOpts{clockRate: clockRate})
}

// fenceOpts vary the fence environment: w1's lease and clock, the
// servers' heartbeat TTL, and what the fence command does after killing
// the writer.
type fenceOpts struct {
	clockRate float64       // w1's clock rate (0: 1)
	lease     time.Duration // w1's lease (0: fenceLease)
	ttl       time.Duration // the servers' heartbeat TTL (0: the harness's)
	// hookFails: the fence command exits 1 with a message and kills
	// nothing (a hook that cannot reach the workload).
	hookFails bool
	// configure edits every server's config last.
	configure func(*server.Config)
	// ownDetach is w1's -own-detach-timeout (0: the default).
	ownDetach time.Duration
}

func newFenceEnvOpts(t *testing.T, o fenceOpts) *fenceEnv {
	t.Helper()
	if o.clockRate == 0 {
		o.clockRate = 1
	}
	if o.lease == 0 {
		o.lease = fenceLease
	}
	var opts harness.Options
	opts.Configure = func(cfg *server.Config) {
		if o.ttl > 0 {
			cfg.HeartbeatTTL = o.ttl
		}
		if o.configure != nil {
			o.configure(cfg)
		}
	}
	c := harness.NewCluster(t, 3, opts)
	c.StartAll()
	c.WaitForLeader(electionWait)
	dir := t.TempDir()
	e := &fenceEnv{
		releaseEnv: &releaseEnv{c: c, root: filepath.Join(dir, "storage"),
			nodes: map[string]*harness.TestPlugin{}, clients: map[string]*harness.TestClient{}},
		hookLog: filepath.Join(dir, "hook.log"), pidDir: filepath.Join(dir, "pids"),
	}
	if err := os.MkdirAll(e.pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.Addr)
	}
	e.api = c.Servers[0].Client()
	// The fence command kills the workload writing through the mount
	// (found by its pid file) and waits until it is gone. Each run is
	// logged with when it started (unix ns).
	hook := fmt.Sprintf(`echo "$(date +%%s%%N) $CLAIMD_NODE_ID $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID $CLAIMD_MOUNT_PATH" >> %s
pid=$(cat %s/$CLAIMD_ALLOC_ID-$CLAIMD_VOLUME_ID 2>/dev/null) || exit 0
kill -9 "$pid" 2>/dev/null
i=0; while [ -d /proc/"$pid" ] && [ "$(cut -d' ' -f3 /proc/"$pid"/stat 2>/dev/null)" != Z ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done`,
		e.hookLog, e.pidDir)
	if o.hookFails {
		hook = fmt.Sprintf(`echo "$(date +%%s%%N) $CLAIMD_NODE_ID $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID $CLAIMD_MOUNT_PATH" >> %s
echo "cannot reach the workload of $CLAIMD_ALLOC_ID" >&2; exit 1`, e.hookLog)
	}
	for i, w := range []string{"w1", "w2"} {
		p := harness.StartPlugin(t, w, hostdir.ModeNode, e.root)
		e.nodes[w] = p
		var edit func(*client.Config)
		if w == "w1" {
			edit = func(cfg *client.Config) {
				cfg.NodeLease, cfg.FenceCommand, cfg.ClockRate = o.lease, hook, o.clockRate
				cfg.OwnDetachTimeout = o.ownDetach
			}
		}
		order := append(append([]string{}, addrs[i%3:]...), addrs[:i%3]...)
		e.clients[w] = c.StartClientWith(w, order, edit, p.Config())
	}
	e.controller = harness.StartPlugin(t, "ctrl", hostdir.ModeController, e.root)
	e.ctrlClient = c.StartClient("ctrl", []string{addrs[2], addrs[1], addrs[0]}, e.controller.Config())
	e.ctrlClient.AdmitControllers()
	waitHostdirHealthy(t, e.api, 2, 1)
	return e
}

func (e *fenceEnv) registerPolicy(t *testing.T, id string, policy structs.NodeLostPolicy) {
	t.Helper()
	registerWithPolicy(t, e.api, id, policy)
}

// mountPath reads where the agent mounted a volume for an allocation
// from its held-claims record.
func mountPath(t *testing.T, tc *harness.TestClient, alloc, vol string) string {
	t.Helper()
	var path string
	harness.WaitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(tc.DataDir, "held-claims.json"))
		if err != nil {
			return err
		}
		var held []struct {
			AllocID   string `json:"alloc_id"`
			VolumeID  string `json:"volume_id"`
			MountPath string `json:"mount_path"`
		}
		if err := json.Unmarshal(b, &held); err != nil {
			return err
		}
		for _, h := range held {
			if h.AllocID == alloc && h.VolumeID == vol && h.MountPath != "" {
				path = h.MountPath
				return nil
			}
		}
		return fmt.Errorf("held claim %s/%s exp: recorded with its mount path got: %s", alloc, vol, b)
	})
	return path
}

// writer is a real process appending "<who> <seq> <unix nanos>" lines,
// synced, to a file in the volume until it is killed.
type writer struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startWriter(t *testing.T, who, mount, pidFile string) *writer {
	t.Helper()
	script := fmt.Sprintf(`i=0; while :; do i=$((i+1)); echo "%s $i $(date +%%s%%N)" >> %s/records || exit 1; sleep 0.02; done`,
		who, mount)
	cmd := exec.Command("/bin/sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &writer{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
	})
	if pidFile != "" {
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

type record struct {
	who string
	at  time.Time
}

func readRecords(t *testing.T, path string) []record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line cut by the kill
		}
		ns, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, record{who: fields[0], at: time.Unix(0, ns)})
	}
	return out
}

// firstOK is the time of the first successful call of method on volume
// ext (from node, "" for any) in a plugin's audit log.
func firstOK(entries []hostdir.AuditEntry, method, ext, node string) time.Time {
	for _, en := range entries {
		if en.Method == method && en.Volume == ext && en.Result == "ok" && (node == "" || en.Node == node) {
			return en.Time
		}
	}
	return time.Time{}
}

func TestNodeFence_FencePolicyMovesWithinTheBound(t *testing.T) {
	testNodeFence(t, 1)
}

// A lost node whose clock runs 5% slow (the most decision 39 allows)
// fences later in real time; the servers' margin still covers it.
func TestNodeFence_SlowClockWithinTheMargin(t *testing.T) {
	if testing.Short() {
		t.Skip("the same path as TestNodeFence_FencePolicyMovesWithinTheBound with a slow clock")
	}
	testNodeFence(t, 1-structs.LeaseClockDrift)
}

func testNodeFence(t *testing.T, clockRate float64) {
	e := newFenceEnv(t, clockRate)
	e.registerPolicy(t, "vf", structs.NodeLostFence)
	e.registerPolicy(t, "vw", structs.NodeLostWait)
	e.run(t, "a1", "w1", "vf")
	e.run(t, "a2", "w1", "vw")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	e.waitAlloc(t, "a2", structs.AllocClientRunning)
	w1 := e.clients["w1"]
	node1 := w1.NodeID()
	n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), node1, structs.QueryOptions{})
	if err != nil || n.Lease != fenceLease {
		t.Fatalf("node w1 exp: lease %s registered got: %+v %v", fenceLease, n, err)
	}
	mount := mountPath(t, w1, "a1", "vf")
	wr := startWriter(t, "w1", mount, filepath.Join(e.pidDir, "a1-vf"))
	// The wait-policy volume has a writer too, which no fence touches.
	mountW := mountPath(t, w1, "a2", "vw")
	wrW := startWriter(t, "w1", mountW, "")
	harness.WaitFor(t, 10*time.Second, func() error {
		b, _ := os.ReadFile(filepath.Join(mount, "records"))
		if strings.Count(string(b), "\n") < 3 {
			return fmt.Errorf("writer records exp: some got: %q", b)
		}
		return nil
	})

	cut := time.Now()
	e.c.Net.Isolate("w1")
	// The fence: the hook kills the writer and the volume is unmounted,
	// all on the node, with no server in reach.
	select {
	case <-wr.done:
	case <-time.After(fenceLease + 10*time.Second):
		t.Fatal("writer on the fenced volume exp: killed by the fence command got: still running")
	}
	fenceFile := filepath.Join(w1.DataDir, "fence.json")
	var rec struct {
		Report *structs.FenceReport `json:"report"`
		Allocs []string             `json:"allocs"`
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(fenceFile)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return err
		}
		if rec.Report == nil || len(rec.Report.Volumes) != 1 || !rec.Report.Volumes[0].Unmounted {
			return fmt.Errorf("fence record exp: vf unmounted got: %s", b)
		}
		return nil
	})
	if v := rec.Report.Volumes[0]; v.VolumeID != "vf" || v.AllocID != "a1" || !v.HookOK {
		t.Fatalf("fence record exp: a1/vf hook ok got: %+v", v)
	}
	hook, _ := os.ReadFile(e.hookLog)
	if want := node1 + " a1 vf " + mount; !strings.Contains(string(hook), want) || strings.Contains(string(hook), " vw ") {
		t.Fatalf("fence command env exp: %q only got: %q", want, hook)
	}
	select {
	case <-wrW.done:
		t.Fatal("writer on the wait-policy volume exp: untouched got: killed")
	default:
	}

	// The servers move vf once the lease has certainly run out: a new
	// allocation on w2 runs.
	e.run(t, "a3", "w2", "vf")
	var moved time.Time
	bound := structs.LeaseExpiry(fenceLease) + 20*time.Second
	harness.WaitFor(t, bound, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a3", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("a3 on w2 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		moved = time.Now()
		return nil
	})
	t.Logf("volume moved %s after the cut (lease %s, servers wait %s after the last heartbeat, clock rate %g)",
		moved.Sub(cut).Round(10*time.Millisecond), fenceLease, structs.LeaseExpiry(fenceLease), clockRate)

	// The plugins' own records: the fence's unmount on w1, then the
	// controller detach from w1, then w2's mount.
	unpub := firstOK(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-vf", "")
	ctrl := firstOK(e.controller.Audit(), "ControllerUnpublishVolume", "ext-vf", "ext-w1")
	pub := firstOK(e.nodes["w2"].Audit(), "NodePublishVolume", "ext-vf", "")
	if unpub.IsZero() || ctrl.IsZero() || pub.IsZero() || !unpub.Before(ctrl) || !ctrl.Before(pub) {
		t.Fatalf("order exp: w1 NodeUnpublish < ControllerUnpublish from w1 < w2 NodePublish got: %s, %s, %s",
			unpub.Format(time.RFC3339Nano), ctrl.Format(time.RFC3339Nano), pub.Format(time.RFC3339Nano))
	}
	if got := ctrl.Sub(cut); got < fenceLease {
		t.Fatalf("controller detach exp: not before the lease ran out (%s) got: %s after the cut", fenceLease, got)
	}
	// The released claim says how: fenced, with when the lease ran out.
	v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "vf", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var released *structs.Claim
	for _, c := range v.Released {
		if c.AllocID == "a1" {
			released = c
		}
	}
	if released == nil || !released.Fenced || released.LeaseExpiredAt.IsZero() || released.ReleasePath() != structs.ReleasePathFenced {
		t.Fatalf("released claim of a1 exp: fenced with the lease expiry got: %+v", released)
	}

	// w2 writes; nothing from w1 lands after w2's first record.
	mount2 := mountPath(t, e.clients["w2"], "a3", "vf")
	startWriter(t, "w2", mount2, "")
	records := filepath.Join(mount2, "records")
	harness.WaitFor(t, 10*time.Second, func() error {
		if b, _ := os.ReadFile(records); !strings.Contains(string(b), "w2 3 ") {
			return fmt.Errorf("w2 records exp: some got none")
		}
		return nil
	})
	var firstW2 time.Time
	for _, r := range readRecords(t, records) {
		switch {
		case r.who == "w2" && firstW2.IsZero():
			firstW2 = r.at
		case r.who == "w1" && !firstW2.IsZero():
			t.Fatalf("single writer exp: no w1 record after w2's first got: w1 at %s after w2 at %s", r.at, firstW2)
		case r.who == "w1" && !r.at.Before(unpub):
			t.Fatalf("fence exp: w1's last record before its unmount (%s) got: one at %s", unpub, r.at)
		}
	}

	// The wait-policy volume has not moved: its claim still waits for
	// the node, and no controller detach ran for it.
	if c := e.claimOf(t, "vw", "a2"); c == nil || c.State.Rank() >= structs.ClaimStateNodeDetached.Rank() {
		t.Fatalf("wait-policy claim while the node is away exp: waiting for the node detach got: %+v", c)
	}
	if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-vw", ""); n != 0 {
		t.Fatalf("wait-policy volume exp: no controller detach while the node is away got: %d", n)
	}

	// The node comes back: it reports its fence, does not mount vf again,
	// and the wait-policy volume's release finishes through its unmount.
	publishesBefore := countCalls(e.nodes["w1"].Audit(), "NodePublishVolume", "ext-vf", "")
	_ = wrW.cmd.Process.Kill() // its allocation is lost: the workload would be stopped
	<-wrW.done
	e.c.Net.Heal()
	harness.WaitFor(t, 30*time.Second, func() error {
		n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), node1, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.LastFence == nil || len(n.LastFence.Volumes) != 1 || n.LastFence.Volumes[0].VolumeID != "vf" {
			return fmt.Errorf("node w1 exp: fence report for vf got: %+v", n.LastFence)
		}
		return nil
	})
	e.waitFreed(t, "vw", 30*time.Second)
	if first, last := firstOK(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-vw", ""), firstOK(e.controller.Audit(), "ControllerUnpublishVolume", "ext-vw", "ext-w1"); first.IsZero() || !first.Before(last) {
		t.Fatalf("wait-policy volume after the node is back exp: node detach before controller detach got: %s, %s", first, last)
	}
	if n := countCalls(e.nodes["w1"].Audit(), "NodePublishVolume", "ext-vf", ""); n != publishesBefore {
		t.Fatalf("fenced volume on the node that came back exp: not mounted again got: %d publishes (was %d)", n, publishesBefore)
	}
	e.waitAlloc(t, "a1", structs.AllocClientLost)
}

// The leader is lost together with the node: the new leader has heard no
// heartbeat from w1 and counts the lease from when it took office, so
// the volume still moves only after the fence, in order.
func TestNodeFence_LeaderLostWithTheNode(t *testing.T) {
	// The new leader's storage hold-off (7.25 s at this lease) stays
	// longer than w1's node lease expiry (5.15 s), as with the default.
	e := newFenceEnvOpts(t, fenceOpts{configure: shortStorageLease})
	e.registerPolicy(t, "vf", structs.NodeLostFence)
	e.run(t, "a1", "w1", "vf")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	mount := mountPath(t, e.clients["w1"], "a1", "vf")
	wr := startWriter(t, "w1", mount, filepath.Join(e.pidDir, "a1-vf"))

	leader := e.c.WaitForLeader(electionWait)
	cut := time.Now()
	e.c.Net.Isolate("w1")
	leader.Stop()
	for _, s := range e.c.Servers {
		if s.Running() {
			e.api = s.Client()
			break
		}
	}
	newLeader := e.c.WaitForLeader(electionWait)
	elected := time.Now()
	select {
	case <-wr.done:
	case <-time.After(fenceLease + 10*time.Second):
		t.Fatal("writer on the fenced volume exp: killed by the fence command got: still running")
	}
	e.run(t, "a3", "w2", "vf")
	harness.WaitFor(t, structs.LeaseExpiry(fenceLease)+30*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a3", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("a3 on w2 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	unpub := firstOK(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-vf", "")
	ctrl := firstOK(e.controller.Audit(), "ControllerUnpublishVolume", "ext-vf", "ext-w1")
	pub := firstOK(e.nodes["w2"].Audit(), "NodePublishVolume", "ext-vf", "")
	if unpub.IsZero() || !unpub.Before(ctrl) || !ctrl.Before(pub) {
		t.Fatalf("order exp: w1 NodeUnpublish < ControllerUnpublish < w2 NodePublish got: %s, %s, %s", unpub, ctrl, pub)
	}
	// The new leader took office after the cut and heard nothing from w1
	// since: it must not have acted before its own lease clock ran out
	// (WaitForLeader returned after it took office, hence the slack of
	// one poll).
	if got := ctrl.Sub(elected); got < structs.LeaseExpiry(fenceLease)-time.Second {
		t.Fatalf("new leader %s exp: controller detach at least %s after taking office got: %s (cut %s before)",
			newLeader.Name, structs.LeaseExpiry(fenceLease), got, elected.Sub(cut))
	}
	t.Logf("leader lost with the node: new leader after %s, volume moved %s after the cut",
		elected.Sub(cut).Round(10*time.Millisecond), pub.Sub(cut).Round(10*time.Millisecond))
}

// A fence whose unmount fails is recorded and reported, and the servers
// move the volume anyway once the lease has run out: they wait for the
// lease, not for the node's word (the fence command already stopped the
// writer). When the node is back its agent finishes the unmount.
func TestNodeFence_FailedUnmountIsReportedAndFinishedLater(t *testing.T) {
	e := newFenceEnv(t, 1)
	e.registerPolicy(t, "vf", structs.NodeLostFence)
	e.run(t, "a1", "w1", "vf")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	w1 := e.clients["w1"]
	node1 := w1.NodeID()
	mount := mountPath(t, w1, "a1", "vf")
	wr := startWriter(t, "w1", mount, filepath.Join(e.pidDir, "a1-vf"))
	e.nodes["w1"].SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1000}})

	e.c.Net.Isolate("w1")
	select {
	case <-wr.done:
	case <-time.After(fenceLease + 10*time.Second):
		t.Fatal("writer exp: killed by the fence command got: still running")
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(w1.DataDir, "fence.json"))
		if err != nil {
			return err
		}
		var rec struct{ Report *structs.FenceReport }
		if err := json.Unmarshal(b, &rec); err != nil {
			return err
		}
		if rec.Report == nil || len(rec.Report.Volumes) != 1 || rec.Report.Volumes[0].Unmounted ||
			!rec.Report.Volumes[0].HookOK || !strings.Contains(rec.Report.Volumes[0].Error, "unpublish") {
			return fmt.Errorf("fence record exp: hook ok, unmount failed with the error got: %s", b)
		}
		return nil
	})

	e.run(t, "a3", "w2", "vf")
	e.waitAlloc(t, "a3", structs.AllocClientRunning)

	e.nodes["w1"].SetControl(hostdir.Control{Seq: 1})
	e.c.Net.Heal()
	harness.WaitFor(t, 30*time.Second, func() error {
		n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), node1, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.LastFence == nil || len(n.LastFence.Volumes) != 1 || n.LastFence.Volumes[0].Error == "" {
			return fmt.Errorf("node w1 exp: fence report with the unmount error got: %+v", n.LastFence)
		}
		return nil
	})
	harness.WaitFor(t, 30*time.Second, func() error {
		if n := countCalls(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-vf", "ok"); n == 0 {
			return fmt.Errorf("w1 NodeUnpublish of vf after it came back exp: done got: none")
		}
		b, err := os.ReadFile(filepath.Join(w1.DataDir, "held-claims.json"))
		if err != nil {
			return err
		}
		if strings.Contains(string(b), `"vf"`) {
			return fmt.Errorf("held claims exp: vf gone got: %s", b)
		}
		return nil
	})
}
