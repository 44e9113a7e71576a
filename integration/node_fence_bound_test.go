package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
)

// The bound (issue 39, item 5; decision 39): a fence-policy volume of a
// node cut off from every server is free for another node no later than
// structs.LeaseExpiry(lease) after the last heartbeat the node had
// acknowledged, plus a small slack for the release itself (one fenced
// checkpoint, the controller detach, one free), and never before the
// node's own fence. The servers' heartbeat TTL is 10 s (marked down after
// 15 s): longer than the short lease's expiry, so the release must not
// wait for the down mark; shorter than the long lease's, so the down mark
// comes first and the release must still wait for the lease.

// boundSlack is what the release may take after the lease ran out on the
// leader's clock: a retry scheduled for the expiry, a fenced checkpoint,
// the controller detach through the controller's agent and the free, on
// a busy two-core machine under -race.
const boundSlack = 2500 * time.Millisecond

func TestNodeFence_BoundShortLeaseDoesNotWaitForTheDownMark(t *testing.T) {
	testFenceBound(t, 2*time.Second)
}

func TestNodeFence_BoundLongLease(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a 20 s lease")
	}
	testFenceBound(t, 20*time.Second)
}

func testFenceBound(t *testing.T, lease time.Duration) {
	const ttl = 10 * time.Second
	e := newFenceEnvOpts(t, fenceOpts{lease: lease, ttl: ttl})
	e.registerPolicy(t, "vf", structs.NodeLostFence)
	e.run(t, "a1", "w1", "vf")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	w1 := e.clients["w1"]
	mount := mountPath(t, w1, "a1", "vf")
	wr := startWriter(t, "w1", mount, filepath.Join(e.pidDir, "a1-vf"))
	// A renewal after the writer started: the lease file then holds a
	// deadline anchored at a heartbeat sent while the writer ran.
	startedBoot := leasefile.Now()
	harness.WaitFor(t, 10*time.Second, func() error {
		f, err := leasefile.Read(leasefile.Path(w1.DataDir))
		if err != nil {
			return err
		}
		if sent := f.Deadline - int64(structs.FenceDeadline(lease)); sent <= startedBoot {
			return fmt.Errorf("lease file exp: a renewal after the writer started got: last send %s before", time.Duration(startedBoot-sent))
		}
		return nil
	})

	// A leader elected during the countdown has heard nothing from w1 and
	// counts the lease from when it took office (decision 39): the bound
	// runs from then. On a loaded machine the test cluster's short Raft
	// timeouts do sometimes elect again; watch for it.
	offices := watchLeaders(t, e)
	cut := time.Now()
	e.c.Net.Isolate("w1")
	select {
	case <-wr.done:
	case <-time.After(lease + 10*time.Second):
		t.Fatal("writer exp: killed by the fence command got: still running")
	}
	// Read after the fence: no renewal can follow.
	lastAck := lastAcknowledgedHeartbeat(t, w1.DataDir, lease)
	if lastAck.After(cut) {
		t.Fatalf("last acknowledged heartbeat exp: sent before the cut %s got: %s", cut, lastAck)
	}
	hookAt := hookStart(t, e.hookLog, "a1")

	// Freed: the claim's free step, stamped by the leader that applied it.
	var freedAt time.Time
	harness.WaitFor(t, structs.LeaseExpiry(lease)+30*time.Second, func() error {
		v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "vf", structs.QueryOptions{})
		if err != nil {
			return err
		}
		for _, c := range v.Released {
			if c.AllocID == "a1" && len(c.Steps) > 0 && c.State == structs.ClaimStateFreed {
				if !c.Fenced {
					return fmt.Errorf("released claim of a1 exp: fenced got: %+v", c)
				}
				freedAt = c.Steps[len(c.Steps)-1].Time
				return nil
			}
		}
		return fmt.Errorf("claim of a1 exp: freed got: live %v past %v", v.WriteClaims, v.PastClaims)
	})
	elected := offices.stop()
	from, by := lastAck, "the last acknowledged heartbeat"
	if elected.After(cut) && elected.After(lastAck) {
		from, by = elected, fmt.Sprintf("the election of the leader that released it (%s after the last ack)", elected.Sub(lastAck).Round(time.Millisecond))
	}
	// Usable on w2: a claim asked for now is granted and mounted.
	e.run(t, "a3", "w2", "vf")
	e.waitAlloc(t, "a3", structs.AllocClientRunning)

	unpub := firstOK(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-vf", "")
	ctrl := firstOK(e.controller.Audit(), "ControllerUnpublishVolume", "ext-vf", "ext-w1")
	pub := firstOK(e.nodes["w2"].Audit(), "NodePublishVolume", "ext-vf", "")
	t.Logf("BOUND lease=%s ttl=%s lease_expiry=%s: freed %s after %s (bound %s + slack %s), "+
		"fence hook at %s, controller detach at %s, w2 publish at %s (after the cut %s; last ack %s before the cut)",
		lease, ttl, structs.LeaseExpiry(lease), freedAt.Sub(from).Round(time.Millisecond), by, structs.LeaseExpiry(lease), boundSlack,
		hookAt.Sub(lastAck).Round(time.Millisecond), ctrl.Sub(lastAck).Round(time.Millisecond), pub.Sub(lastAck).Round(time.Millisecond),
		pub.Sub(cut).Round(time.Millisecond), cut.Sub(lastAck).Round(time.Millisecond))

	if got, limit := freedAt.Sub(from), structs.LeaseExpiry(lease)+boundSlack; got > limit {
		t.Fatalf("bound exp: freed within LeaseExpiry(%s) + %s = %s of %s got: %s", lease, boundSlack, limit, by, got)
	}
	if unpub.IsZero() || ctrl.IsZero() || pub.IsZero() || !hookAt.Before(ctrl) || !unpub.Before(ctrl) || !ctrl.Before(pub) || freedAt.Before(hookAt) {
		t.Fatalf("order exp: w1 fence hook (%s), w1 unmount (%s) < controller detach (%s) < w2 publish (%s), freed (%s) after the hook",
			hookAt.Format(time.RFC3339Nano), unpub.Format(time.RFC3339Nano), ctrl.Format(time.RFC3339Nano), pub.Format(time.RFC3339Nano), freedAt.Format(time.RFC3339Nano))
	}
	// The servers acted on their own lease clock, not on the node's word:
	// never before the lease had run out by the servers' rule.
	if got := ctrl.Sub(lastAck); got < structs.LeaseExpiry(lease)-time.Duration(float64(structs.LeaseMargin)*0.5) {
		t.Fatalf("controller detach exp: not before the lease ran out (%s after the last ack) got: %s", structs.LeaseExpiry(lease), got)
	}
}

// hookStart is when the fence command first ran for alloc (its log line's
// unix ns).
func hookStart(t *testing.T, log, alloc string) time.Time {
	t.Helper()
	var at time.Time
	harness.WaitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(log)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) >= 3 && fields[2] == alloc {
				ns, err := strconv.ParseInt(fields[0], 10, 64)
				if err != nil {
					return fmt.Errorf("hook log line %q: %v", line, err)
				}
				at = time.Unix(0, ns)
				return nil
			}
		}
		return fmt.Errorf("hook log exp: a run for %s got: %q", alloc, b)
	})
	return at
}

// leaderWatch polls for the cluster's leader and remembers when the
// current one was first seen after a change (no leader, or another).
type leaderWatch struct {
	done    chan struct{}
	stopped chan struct{}
	since   time.Time
}

func watchLeaders(t *testing.T, e *fenceEnv) *leaderWatch {
	t.Helper()
	w := &leaderWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	first := e.c.Leader()
	go func() {
		defer close(w.stopped)
		cur := first
		for {
			select {
			case <-w.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if l := e.c.Leader(); l != cur {
				cur = l
				w.since = time.Now()
			}
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// stop ends the watch; it returns when the leader at the end was first
// seen, or zero when it never changed.
func (w *leaderWatch) stop() time.Time {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.stopped
	return w.since
}

// The other side of the bound: a node that keeps heartbeating keeps its
// lease, so however long its unmount fails, its fence-policy claim is
// never fenced (the servers would otherwise give the volume to another
// node while this one, alive and renewing, still has it mounted). The
// release retries the node detach and finishes through it once the
// plugin recovers.
//
// w1's own unmount at the stop fails too, and gets ownDetachWindow: with
// the default 10 s the servers' release started only just before the
// watch below ended, so the watch saw their retries for a moment at best.
func TestNodeFence_ALiveNodeWhoseUnmountFailsIsNeverFenced(t *testing.T) {
	e := newFenceEnvOpts(t, fenceOpts{ownDetach: ownDetachWindow})
	e.registerPolicy(t, "vf", structs.NodeLostFence)
	e.run(t, "a1", "w1", "vf")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	w1 := e.clients["w1"]
	e.nodes["w1"].SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 100000}})
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// Watch for twice the lease's expiry: the claim stays past, unfenced,
	// its node ready; no controller detach.
	watchFor := 2 * structs.LeaseExpiry(fenceLease)
	sawRetry := false
	for time.Since(stopped) < watchFor {
		ctx := harness.Ctx(t, 10*time.Second)
		c := e.claimOf(t, "vf", "a1")
		if c == nil || c.Fenced || c.State.Rank() >= structs.ClaimStateNodeDetached.Rank() {
			t.Fatalf("claim of a1 on a live node whose unmount fails exp: past, waiting for its node detach got: %+v", c)
		}
		n, _, err := e.api.Node(ctx, w1.NodeID(), structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Status != structs.NodeStatusReady {
			t.Fatalf("node w1, heartbeating exp: ready got: %s", n.Status)
		}
		if st, err := e.api.ReleaseStatus(ctx); err == nil && st["vf"].Attempts > 0 {
			sawRetry = true
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	if !sawRetry {
		t.Fatal("release of vf exp: retried node detaches seen in the release status got: none")
	}
	if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-vf", ""); n != 0 {
		t.Fatalf("controller detach while the node still holds the volume exp: none got: %d", n)
	}
	e.nodes["w1"].SetControl(hostdir.Control{Seq: 1})
	e.waitFreed(t, "vf", 60*time.Second)
	v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "vf", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Released[len(v.Released)-1]; c.AllocID != "a1" || c.Fenced || c.ReleasePath() != structs.ReleasePathNodeDetach {
		t.Fatalf("released claim of a1 exp: through the node detach, not fenced got: %+v", c)
	}
	unpub := firstOK(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-vf", "")
	ctrl := firstOK(e.controller.Audit(), "ControllerUnpublishVolume", "ext-vf", "ext-w1")
	if unpub.IsZero() || ctrl.IsZero() || !unpub.Before(ctrl) {
		t.Fatalf("order exp: w1 NodeUnpublish ok < ControllerUnpublish got: %s, %s", unpub, ctrl)
	}
}

// lastAcknowledgedHeartbeat is when the node's last acknowledged heartbeat
// was sent, from its lease file: the agent anchors its deadline at that
// send on CLOCK_BOOTTIME; converted to wall time here (one machine).
func lastAcknowledgedHeartbeat(t *testing.T, dataDir string, lease time.Duration) time.Time {
	t.Helper()
	f, err := leasefile.Read(leasefile.Path(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	nowWall, nowBoot := time.Now(), leasefile.Now()
	return nowWall.Add(-time.Duration(nowBoot - (f.Deadline - int64(structs.FenceDeadline(lease)))))
}
