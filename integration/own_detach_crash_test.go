package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/internal/faultpoint"
	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// The holding node detaches first (client/stop_detach.go): at an
// allocation's stop the agent unmounts, drops its held record and only
// then reports the allocation complete with the volumes it detached. These
// tests put a kill -9 or a long pause of the agent exactly between those
// steps (fault points, internal/faultpoint: the agent process stops itself
// there) and check what the project's rule asks of every storage step: the
// claim is released, the mount is gone, and a single-writer volume is
// never mounted for two allocations (the plugins' own audit logs).
//
// The agent w1 is a real claimd process (mutual TLS, its node secret, no
// token); the servers, the waiting node w2, the controller node and the
// hostdir plugins run in this process on loopback, as in
// node_fence_restart_test.go.

// Names of the fault points in client/stop_detach.go.
const (
	odPointMarked        = "own-detach:marked-stopping"
	odPointUnmounted     = "own-detach:unmounted"
	odPointRecordDropped = "own-detach:records-dropped"
)

type odEnv struct {
	*agentProcessEnv
	// points is the file w1's $CLAIMD_FAULT_POINTS names.
	points string
}

// newOwnDetachEnv starts three servers telling nodes to heartbeat within
// ttl, w1 as an agent process (with extra flags) whose fault points the
// test arms, and w2 and a controller in process.
func newOwnDetachEnv(t *testing.T, ttl time.Duration, extra ...string) *odEnv {
	t.Helper()
	return newOwnDetachEnvLease(t, ttl, 0, extra...)
}

// newOwnDetachEnvLease is newOwnDetachEnv with the servers' storage lease
// (0: the default).
func newOwnDetachEnvLease(t *testing.T, ttl, storageLease time.Duration, extra ...string) *odEnv {
	t.Helper()
	c := harness.NewCluster(t, 3, harness.Options{Configure: func(cfg *server.Config) {
		cfg.HeartbeatTTL, cfg.StorageLease = ttl, storageLease
	}})
	c.StartAll()
	c.WaitForLeader(electionWait)
	dir := t.TempDir()
	e := &odEnv{agentProcessEnv: newAgentProcessEnv(c, dir), points: filepath.Join(dir, "fault-points")}
	if err := os.WriteFile(e.points, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The agent process inherits the variable; this test process read it
	// (empty) when it started, so nothing in process ever stops.
	t.Setenv(faultpoint.Env, e.points)
	e.startNodes(t, extra...)
	// The statement is written only once every server said it applies it
	// (entry type 30); before that every release takes the servers' path
	// and these tests would not test the node's.
	c.WaitForHolderDetach(30 * time.Second)
	return e
}

// holdAndWait registers v (single node writer, under policy), runs a1 on
// w1 with it and places a2 on w2 asking for it too: a2 waits for a1's
// claim. It returns w1's mount path of v.
func (e *odEnv) holdAndWait(t *testing.T, policy structs.NodeLostPolicy) string {
	t.Helper()
	registerWithPolicy(t, e.api, "v", policy)
	e.place(t, "a1", e.w1Node)
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	mount, ok := heldClaimPath(t, e.w1Data, "a1", "v")
	if !ok || mount == "" {
		t.Fatal("w1 held claims exp: a1/v with its mount path got: none")
	}
	if _, err := os.Lstat(mount); err != nil {
		t.Fatalf("w1 mount of v exp: present got: %v", err)
	}
	e.place(t, "a2", e.clients["w2"].NodeID())
	return mount
}

func (e *odEnv) place(t *testing.T, allocID, nodeID string) {
	t.Helper()
	a := &structs.Alloc{ID: allocID, NodeID: nodeID, Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v"}}}
	if _, err := e.api.PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
}

// stopAt arms point in w1, stops a1 and waits until w1 stopped itself
// there.
func (e *odEnv) stopAt(t *testing.T, point string) {
	t.Helper()
	if err := os.WriteFile(e.points, []byte(point+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(e.w1.Output(), "fault point "+point+": stopping") {
			return fmt.Errorf("w1 exp: stopped at %s got: not there yet", point)
		}
		if st := procState(e.w1.PID()); st != 'T' && st != 't' {
			return fmt.Errorf("w1 process state exp: stopped got: %q", st)
		}
		return nil
	})
}

// procState is the state letter of /proc/<pid>/stat (0 if unreadable).
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// checkStillLive asserts the servers got no report while w1 is stopped:
// a1 is desired-stop and not terminal, and its claim is live.
func (e *odEnv) checkStillLive(t *testing.T) {
	t.Helper()
	a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Terminal() || a.DesiredStatus != structs.AllocDesiredStop {
		t.Fatalf("a1 while w1 is stopped before its report exp: desired stop, not terminal got: %s/%s", a.DesiredStatus, a.ClientStatus)
	}
	v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "v", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v.LiveClaim("a1") == nil {
		t.Fatalf("a1's claim while w1 is stopped before its report exp: live got: %+v", v.Claim("a1"))
	}
}

// checkHandedOver waits for a2 to run on w2 with v, then checks the end
// state: a1's claim is gone, w1 holds no record of it and its mount path
// is gone, and v was never published for two allocations at once.
func (e *odEnv) checkHandedOver(t *testing.T, mount string) {
	t.Helper()
	e.waitAlloc(t, "a2", structs.AllocClientRunning)
	if c := e.claimOf(t, "v", "a1"); c != nil {
		t.Fatalf("a1's claim once a2 runs exp: none got: %+v", c)
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		if _, ok := heldClaimPath(t, e.w1Data, "a1", "v"); ok {
			return fmt.Errorf("w1 held claims exp: a1/v gone got: still held")
		}
		return nil
	})
	if _, err := os.Lstat(mount); !os.IsNotExist(err) {
		t.Fatalf("w1's mount path of a1/v exp: gone got: %v", err)
	}
	checkNeverTwoHolders(t, "ext-v", e.w1Plugin, e.nodes["w2"])
}

// checkNeverTwoHolders replays the node plugins' audit logs (one clock:
// they run in this process) and fails if vol was ever published at two
// targets at once.
func checkNeverTwoHolders(t *testing.T, vol string, plugins ...*harness.TestPlugin) {
	t.Helper()
	var all []hostdir.AuditEntry
	for _, p := range plugins {
		all = append(all, p.Audit()...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	held := map[string]bool{}
	var trail []string
	publishes := 0
	for _, en := range all {
		if en.Volume != vol || en.Result != "ok" {
			continue
		}
		key := en.Node + ":" + en.Target
		switch en.Method {
		case "NodePublishVolume":
			held[key] = true
			publishes++
		case "NodeUnpublishVolume":
			delete(held, key)
		default:
			continue
		}
		trail = append(trail, en.Method+" "+key)
		if len(held) > 1 {
			t.Fatalf("single writer exp: %s published once at a time got: %d at once after %v", vol, len(held), trail)
		}
	}
	if publishes < 2 {
		t.Fatalf("audit exp: %s published on w1 then on w2 got: %v", vol, trail)
	}
}

// logLine reports whether out has a line with msg that names alloc a1
// and volume v.
func logLine(out, msg string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, msg) && strings.Contains(l, "alloc=a1") && strings.Contains(l, "volume=v") {
			return true
		}
	}
	return false
}

// waitLog waits for w1's output after mark ("" for all of it) to have a
// line with msg about a1/v. It polls: the agent's output reaches the test
// through a pipe, a line written just before an effect the test saw may
// not have been read yet. (Absence is never checked on the output for
// that reason; the plugins' audit logs, written in process before a call
// returns, are the record for what must not have happened.)
func (e *odEnv) waitLog(t *testing.T, mark, msg, what string) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, func() error {
		out := e.w1.Output()
		if mark != "" {
			i := strings.Index(out, mark)
			if i < 0 {
				return fmt.Errorf("w1 exp: %q in its output got: not yet", mark)
			}
			out = out[i:]
		}
		if !logLine(out, msg) {
			return fmt.Errorf("w1 exp: %s (%q) got: not in its output", what, msg)
		}
		return nil
	})
}

// unpublishes counts w1's successful NodeUnpublish calls of v.
func (e *odEnv) unpublishes() int {
	return countCalls(e.w1Plugin.Audit(), "NodeUnpublishVolume", "ext-v", "ok")
}

// firstOKAfter is when the first successful method call for vol finished
// after t0 (zero if none).
func firstOKAfter(entries []hostdir.AuditEntry, method, vol string, t0 time.Time) time.Time {
	for _, en := range entries {
		if en.Method == method && en.Volume == vol && en.Result == "ok" && en.Time.After(t0) {
			return en.Time
		}
	}
	return time.Time{}
}

// (a) kill -9 after the own unmount, before the held record is dropped:
// the restarted agent finds the allocation desired-stop and not terminal,
// runs its stop again (the unmount finds nothing mounted), drops the
// record and reports with the statement: the claim is released by the
// node's own detach, not the servers'.
func TestOwnDetach_KilledAfterUnmountBeforeRecordDrop(t *testing.T) {
	// A long TTL: the restart must not be taken for a node loss, so that
	// the path under test is the agent's, not the servers'.
	e := newOwnDetachEnv(t, 10*time.Second)
	mount := e.holdAndWait(t, structs.NodeLostWait)
	e.stopAt(t, odPointUnmounted)
	if _, err := os.Lstat(mount); !os.IsNotExist(err) {
		t.Fatalf("w1's mount path at %s exp: unmounted got: %v", odPointUnmounted, err)
	}
	if _, ok := heldClaimPath(t, e.w1Data, "a1", "v"); !ok {
		t.Fatalf("w1 held claims at %s exp: a1/v still recorded got: dropped", odPointUnmounted)
	}
	e.checkStillLive(t)
	e.w1.Restart()
	e.checkHandedOver(t, mount)
	e.waitAlloc(t, "a1", structs.AllocClientComplete)
	e.waitLog(t, "", "own node detach done", "its own node detach of a1/v, again")
	// Its own unmount before the kill, its own again after the restart
	// (finding nothing mounted), and none from the servers: the statement
	// released the claim.
	if n := e.unpublishes(); n != 2 {
		t.Fatalf("w1 NodeUnpublish of v exp: 2 (own, own again) got: %d", n)
	}
}

// (a) kill -9 before the own unmount (the claim marked stopping): the
// restarted agent unmounts, drops the record and reports with the
// statement.
func TestOwnDetach_KilledBeforeUnmount(t *testing.T) {
	e := newOwnDetachEnv(t, 10*time.Second)
	mount := e.holdAndWait(t, structs.NodeLostWait)
	e.stopAt(t, odPointMarked)
	if _, err := os.Lstat(mount); err != nil {
		t.Fatalf("w1's mount path at %s exp: still mounted got: %v", odPointMarked, err)
	}
	e.checkStillLive(t)
	e.w1.Restart()
	e.checkHandedOver(t, mount)
	e.waitAlloc(t, "a1", structs.AllocClientComplete)
	e.waitLog(t, "", "own node detach done", "its own node detach of a1/v after the restart")
	if n := e.unpublishes(); n != 1 {
		t.Fatalf("w1 NodeUnpublish of v exp: 1 (its own, after the restart) got: %d", n)
	}
}

// (a) kill -9 after the held record is dropped, before the report: the
// restarted agent holds no record of the claim, so it states nothing; the
// report goes without the volume and the servers' node detach (which
// finds nothing mounted, seed 6) releases it.
func TestOwnDetach_KilledAfterRecordDropBeforeReport(t *testing.T) {
	e := newOwnDetachEnv(t, 10*time.Second)
	mount := e.holdAndWait(t, structs.NodeLostWait)
	e.stopAt(t, odPointRecordDropped)
	if _, ok := heldClaimPath(t, e.w1Data, "a1", "v"); ok {
		t.Fatalf("w1 held claims at %s exp: a1/v dropped got: still recorded", odPointRecordDropped)
	}
	e.checkStillLive(t)
	e.w1.Restart()
	e.checkHandedOver(t, mount)
	e.waitAlloc(t, "a1", structs.AllocClientComplete)
	e.waitLog(t, "", "node detached volume", "the servers' node detach of a1/v")
	if n := e.unpublishes(); n != 2 {
		t.Fatalf("w1 NodeUnpublish of v exp: 2 (own, then the servers') got: %d", n)
	}
}

// (b) A pause after the own unmount that outlasts the heartbeat TTL: the
// servers mark w1 down, a1 lost and its claim past in one entry. The
// node's late report (complete, with the statement) finds a1 terminal and
// changes nothing; the servers' node detach releases the claim once w1 is
// back, and a2 gets v only then.
func TestOwnDetach_PausedAfterUnmountPastTheTTL(t *testing.T) {
	testPausedPastTTL(t, odPointUnmounted)
}

// (b) The same pause after the held record is dropped, just before the
// report.
func TestOwnDetach_PausedBeforeReportPastTheTTL(t *testing.T) {
	testPausedPastTTL(t, odPointRecordDropped)
}

// (b) The same pause before the own unmount: the mount is still there
// while w1 is away, so nothing may release the claim (no statement was
// made, and none is sent here); resumed, w1 unmounts, and the servers'
// node detach (finding nothing) releases it.
func TestOwnDetach_PausedBeforeUnmountPastTheTTL(t *testing.T) {
	testPausedPastTTL(t, odPointMarked)
}

func testPausedPastTTL(t *testing.T, point string) {
	e := newOwnDetachEnv(t, 2*time.Second)
	mount := e.holdAndWait(t, structs.NodeLostWait)
	e.stopAt(t, point)
	e.waitW1Down(t)
	e.waitAlloc(t, "a1", structs.AllocClientLost)
	before := e.unpublishes()

	// Once it unmounted, w1's report will carry the statement.
	if point != odPointMarked {
		e.sendLateReport(t)
	}
	// While w1 is away its claim waits for it (wait policy): a late
	// statement neither ended a1 differently nor released the claim, and
	// a2 does not get v.
	a1, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{})
	if err != nil || a1.ClientStatus != structs.AllocClientLost {
		t.Fatalf("a1 after the late report exp: lost (the first terminal status stands) got: %+v %v", a1, err)
	}
	if c := e.claimOf(t, "v", "a1"); c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("a1's claim after the late statement, w1 down exp: unpublishing got: %+v", c)
	}
	a2, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a2", structs.QueryOptions{})
	if err != nil || a2.ClientStatus != structs.AllocClientPending {
		t.Fatalf("a2 while w1 is down exp: pending got: %+v %v", a2, err)
	}
	if n := e.unpublishes(); n != before {
		t.Fatalf("w1 NodeUnpublish of v while it is stopped exp: %d got: %d", before, n)
	}

	resumed := time.Now()
	if err := syscall.Kill(e.w1.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e.checkHandedOver(t, mount)
	e.waitAlloc(t, "a1", structs.AllocClientLost)
	if point != odPointMarked {
		// (Before the unmount, the resumed stop task may be cancelled
		// mid-unmount by the list that shows a1 lost: either way is right.)
		e.waitLog(t, "", "own node detach done", "its own node detach done")
	}
	e.waitLog(t, "fault point "+point+": resumed", "node detached volume", "the servers' node detach of a1/v once back")
	// a2 was given v only after the servers' node detach on w1, after the
	// resume.
	unpub := firstOKAfter(e.w1Plugin.Audit(), "NodeUnpublishVolume", "ext-v", resumed)
	pub := firstOKAfter(e.nodes["w2"].Audit(), "NodePublishVolume", "ext-v", time.Time{})
	if unpub.IsZero() || pub.IsZero() || !unpub.Before(pub) {
		t.Fatalf("order exp: w1's node detach after the resume, then w2's publish got: unpublish %s, publish %s (resumed %s)",
			unpub.Format(time.RFC3339Nano), pub.Format(time.RFC3339Nano), resumed.Format(time.RFC3339Nano))
	}
}

// sendLateReport sends the report a resumed w1 would send: a1 complete,
// v detached. The agent itself may not send it: resumed, it also reads
// the allocation list that shows a1 lost, which cancels the stop task,
// and which comes first is a race. So the test sends it, over TLS with
// the node's own secret (the one proof the servers keep a statement
// for), while w1 is still stopped.
func (e *odEnv) sendLateReport(t *testing.T) {
	t.Helper()
	var id struct{ ID, Secret string }
	b, err := os.ReadFile(filepath.Join(e.w1Data, "node-identity.json"))
	if err == nil {
		err = json.Unmarshal(b, &id)
	}
	if err != nil || id.Secret == "" {
		t.Fatalf("w1 node identity: %v", err)
	}
	late := &structs.AllocClientUpdateRequest{NodeID: e.w1Node,
		Allocs:       []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientComplete, ClientDescription: "stopped", DetachedVolumes: []string{"v"}}},
		WriteRequest: structs.WriteRequest{AuthToken: id.Secret}}
	if err := e.c.Servers[0].ClientWithToken("").Call(harness.Ctx(t, 30*time.Second), "Node.UpdateAlloc", late, &structs.GenericResponse{}); err != nil {
		t.Fatalf("w1's late report exp: accepted (and ignored) got: %v", err)
	}
}

// (b, fence policy) The same pause, on a fence-policy volume with a short
// node lease: the servers do not wait for w1 but for its lease, then
// release the claim without a node detach (fenced) and give v to a2 while
// w1 is still stopped. That is safe because w1 unmounted before it
// stopped (and would have fenced had it not). Resumed, w1 finishes its
// stop, a1 stays lost, and it neither mounts v again nor keeps a record
// of it.
func TestOwnDetach_PausedAfterUnmountPastTheLeaseFencePolicy(t *testing.T) {
	e := newOwnDetachEnv(t, 2*time.Second, "-node-lease", restartLease.String())
	mount := e.holdAndWait(t, structs.NodeLostFence)
	e.stopAt(t, odPointUnmounted)
	stopped := time.Now()
	before := e.unpublishes()
	harness.WaitFor(t, structs.LeaseExpiry(restartLease)+30*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a2", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("a2 on w2 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	if st := procState(e.w1.PID()); st != 'T' && st != 't' {
		t.Fatalf("w1 when v moved to w2 exp: still stopped got: state %q", st)
	}
	if n := e.unpublishes(); n != before {
		t.Fatalf("w1 NodeUnpublish of v while it is stopped exp: %d (the release skipped the node: fenced) got: %d", before, n)
	}
	t.Logf("v moved to w2 %s after w1 stopped itself", time.Since(stopped).Round(10*time.Millisecond))
	e.waitAlloc(t, "a1", structs.AllocClientLost)
	resumed := time.Now()
	if err := syscall.Kill(e.w1.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e.waitLog(t, "fault point "+odPointUnmounted+": resumed", "own node detach done", "its own node detach finished")
	e.checkHandedOver(t, mount)
	e.waitAlloc(t, "a1", structs.AllocClientLost)
	if pub := firstOKAfter(e.w1Plugin.Audit(), "NodePublishVolume", "ext-v", resumed); !pub.IsZero() {
		t.Fatalf("resumed w1 exp: does not mount v again got: NodePublish at %s", pub.Format(time.RFC3339Nano))
	}
}

// (c) The own unmount fails (the node plugin is down): the report goes
// without the volume, the claim waits in unpublishing, and the servers'
// node detach does the unmount once the plugin is back; then a2 gets v.
func TestOwnDetach_FailedUnmountLeftToTheServers(t *testing.T) {
	testFailedUnmount(t, []string{"own node detach failed"},
		func(e *odEnv) { e.w1Plugin.Stop() },
		func(e *odEnv) { e.w1Plugin.Start() })
}

// (c) The own unmount hangs (the plugin does not answer NodeUnpublish):
// the stop gives up and reports without the volume rather than holding
// the report for the plugin; the servers' node detach, with its retries,
// does it once the plugin answers again. (The bound is the stop's own
// -own-detach-timeout, ownDetachWindow here, over the unmount's tries and
// its lock wait.) The deadline reads either way: gRPC reports its own
// context's end as "context deadline exceeded", or, when the cancel's
// RST_STREAM comes back first, as the stream terminated with code
// DeadlineExceeded (CI on a5ac17f failed on the second form).
func TestOwnDetach_HungUnmountDoesNotHoldTheReport(t *testing.T) {
	testFailedUnmount(t, []string{"context deadline exceeded", "(grpc DeadlineExceeded)"},
		func(e *odEnv) {
			e.w1Plugin.SetControl(hostdir.Control{Delay: map[string]string{"NodeUnpublishVolume": "10m"}})
		},
		func(e *odEnv) { e.w1Plugin.SetControl(hostdir.Control{Seq: 1}) })
}

// testFailedUnmount makes w1's own unmount of v fail with breakPlugin,
// checks the fallback (the failure logged with one of errTexts), and lets
// the servers finish after fixPlugin. w1 gives its own unmount
// ownDetachWindow, not the default 10 s: it can only fail here. The
// servers run with the shortest storage lease (leaderlease.Min): it bounds
// each of their node detaches, which a hung plugin makes wait it out, once
// before the test fixes the plugin and perhaps once after.
func testFailedUnmount(t *testing.T, errTexts []string, breakPlugin, fixPlugin func(*odEnv)) {
	e := newOwnDetachEnvLease(t, 2*time.Second, leaderlease.Min, "-own-detach-timeout", ownDetachWindow.String())
	mount := e.holdAndWait(t, structs.NodeLostWait)
	breakPlugin(e)
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "a1", structs.AllocClientComplete)
	harness.WaitFor(t, 10*time.Second, func() error {
		for _, l := range strings.Split(e.w1.Output(), "\n") {
			if !logLine(l, "own node detach failed") {
				continue
			}
			for _, text := range errTexts {
				if strings.Contains(l, text) {
					return nil
				}
			}
		}
		return fmt.Errorf("w1 exp: its own node detach of a1/v failed with one of %q got: no such line", errTexts)
	})
	// The servers' path holds the claim until the node plugin can unmount.
	harness.WaitFor(t, 60*time.Second, func() error {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if st["v"].Attempts < 1 {
			return fmt.Errorf("release of v exp: retrying got: %+v", st["v"])
		}
		return nil
	})
	if c := e.claimOf(t, "v", "a1"); c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("a1's claim while w1's plugin cannot unmount exp: unpublishing got: %+v", c)
	}
	if _, ok := heldClaimPath(t, e.w1Data, "a1", "v"); !ok {
		t.Fatal("w1 held claims while the unmount failed exp: a1/v kept got: dropped")
	}
	if _, err := os.Lstat(mount); err != nil {
		t.Fatalf("w1's mount path while the unmount failed exp: still there got: %v", err)
	}
	if a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a2", structs.QueryOptions{}); err != nil || a.ClientStatus != structs.AllocClientPending {
		t.Fatalf("a2 while a1's claim is not released exp: pending got: %+v %v", a, err)
	}
	if n := e.unpublishes(); n != 0 {
		t.Fatalf("w1 NodeUnpublish of v while the plugin cannot exp: none got: %d", n)
	}
	back := time.Now()
	fixPlugin(e)
	// A servers' node detach in flight when the plugin is fixed may wait
	// out its budget first.
	harness.WaitFor(t, 60*time.Second, func() error {
		if c := e.claimOf(t, "v", "a1"); c != nil {
			return fmt.Errorf("a1's claim once the plugin is back exp: released got: %+v", c)
		}
		return nil
	})
	e.checkHandedOver(t, mount)
	e.waitLog(t, "", "node detached volume", "the servers' node detach of a1/v once the plugin is back")
	unpub := firstOKAfter(e.w1Plugin.Audit(), "NodeUnpublishVolume", "ext-v", back)
	pub := firstOKAfter(e.nodes["w2"].Audit(), "NodePublishVolume", "ext-v", time.Time{})
	if unpub.IsZero() || pub.IsZero() || !unpub.Before(pub) {
		t.Fatalf("order exp: w1's unpublish once its plugin is back, then w2's publish got: unpublish %s, publish %s",
			unpub.Format(time.RFC3339Nano), pub.Format(time.RFC3339Nano))
	}
}
