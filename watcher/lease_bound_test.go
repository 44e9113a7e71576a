package watcher

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/attachment"
	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// The bound (issue 39, item 5): a fence-policy release goes on when the
// lease has certainly run out on the leader's clock, not when the node is
// marked down (heartbeat TTL + grace, which may be longer).

// timedLeases runs out at a fixed time, as the real clock says.
type timedLeases struct {
	mu sync.Mutex
	at time.Time
}

func (c *timedLeases) LeaseExpiry(string, time.Duration) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, !time.Now().Before(c.at)
}

func (c *timedLeases) set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = at
}

// startSlowWatcher: a watcher whose backoff (a minute) is far longer than
// any test wait, so only a retry at the lease's expiry can finish a release.
func startSlowWatcher(t *testing.T, l *fsmtest.Local, leases LeaseClock, csi *recordingCSI) *Watcher {
	t.Helper()
	w := New(Config{BackoffBase: time.Minute, BackoffMax: time.Minute}, l, l, attachment.New(l, csi, fsmtest.HeldLease(), nil))
	w.SetLeases(leases)
	w.SetEnabled(true)
	t.Cleanup(func() { w.SetEnabled(false) })
	return w
}

func completeA1(t *testing.T, l *fsmtest.Local) {
	t.Helper()
	l.Must(t, structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: "n1",
		Allocs: []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientComplete}}})
}

// The alloc stopped while its node was cut off: the node is still marked
// ready and its node detach fails. The release retries when the lease
// runs out (not on its minute of backoff), marks the node down and fences
// the claim.
func TestWatcher_FenceOnAReadyNodeGoesOnWhenTheLeaseRunsOut(t *testing.T) {
	l := fsmtest.New()
	setupLeaseClaim(t, l, structs.NodeLostFence)
	completeA1(t, l)
	leases := &timedLeases{}
	runsOut := time.Now().Add(time.Second)
	leases.set(runsOut)
	csi := &recordingCSI{nodeFails: 1000}
	w := startSlowWatcher(t, l, leases, csi)
	st := waitAttempts(t, w, 1)
	if !strings.Contains(st.LastError, "node plugin missing") || !st.LeaseExpiresAt.Equal(runsOut) || st.NextTry.After(runsOut.Add(time.Second)) {
		t.Fatalf("release status while the lease runs exp: the node detach error, retry at the lease expiry %s got: %+v", runsOut, st)
	}
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if done := time.Now(); done.Before(runsOut) {
		t.Fatalf("release exp: not before the lease ran out (%s) got: done at %s", runsOut, done)
	}
	if got, exp := fmt.Sprint(csi.log()), "[node-fail a1 controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
	v, _ := l.State().VolumeByID(nil, "v1")
	if c := v.Released[0]; !c.Fenced || !c.LeaseExpiredAt.Equal(runsOut.Round(0).UTC()) {
		t.Fatalf("released claim exp: fenced at %s got: %+v", runsOut, c)
	}
	if n, _ := l.State().NodeByID(nil, "n1"); n.Status != structs.NodeStatusDown {
		t.Fatalf("node whose lease ran out exp: marked down got: %s", n.Status)
	}
}

// A node that heartbeats keeps its lease live: however often its node
// detach fails, its claim is never fenced, and the release finishes by
// the node detach once the node manages it.
func TestWatcher_ARenewingNodeIsNodeDetachedNeverFenced(t *testing.T) {
	l := fsmtest.New()
	setupLeaseClaim(t, l, structs.NodeLostFence)
	completeA1(t, l)
	leases := &timedLeases{}
	leases.set(time.Now().Add(50 * time.Millisecond))
	csi := &recordingCSI{nodeFails: 3}
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		// Heartbeats: the lease's expiry keeps moving ahead.
		defer close(renewed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				leases.set(time.Now().Add(50 * time.Millisecond))
			}
		}
	}()
	defer func() { close(stop); <-renewed }()
	startSlowWatcher(t, l, leases, csi)
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got, exp := fmt.Sprint(csi.log()), "[node-fail a1 node-fail a1 node-fail a1 node a1 controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
	v, _ := l.State().VolumeByID(nil, "v1")
	if c := v.Released[0]; c.Fenced || c.ReleasePath() != structs.ReleasePathNodeDetach {
		t.Fatalf("released claim of a renewing node exp: node-detached, not fenced got: %+v", c)
	}
	if n, _ := l.State().NodeByID(nil, "n1"); n.Status != structs.NodeStatusReady {
		t.Fatalf("renewing node exp: ready got: %s", n.Status)
	}
}

// A node holding a lease is marked down when its lease runs out on the
// leader's clock, though its heartbeat TTL is an hour; a node without a
// lease waits for its TTL.
func TestHeartbeats_ALeaseHolderIsMarkedDownWhenItsLeaseRunsOut(t *testing.T) {
	l := fsmtest.New()
	setupLeaseClaim(t, l, structs.NodeLostFence) // n1: 5 s lease, c1: none
	h := NewHeartbeats(l, l, time.Hour, time.Hour, nil)
	h.SetEnabled(true)
	defer h.SetEnabled(false)
	lease := 5 * time.Second
	last := time.Now().Add(-structs.LeaseExpiry(lease) + 300*time.Millisecond)
	h.Received("n1", last)
	h.Received("c1", last)
	testutil.WaitFor(t, 5*time.Second, func() error {
		n, _ := l.State().NodeByID(nil, "n1")
		if n.Status != structs.NodeStatusDown {
			return fmt.Errorf("n1 exp: down got: %s", n.Status)
		}
		return nil
	})
	if at, expired := h.LeaseExpiry("n1", lease); !expired || time.Now().Before(at) {
		t.Fatalf("n1 marked down exp: only once its lease ran out got: runs out at %s", at)
	}
	a, _ := l.State().AllocByID(nil, "a1")
	if a.ClientStatus != structs.AllocClientLost {
		t.Fatalf("alloc on the node whose lease ran out exp: lost got: %s", a.ClientStatus)
	}
	if c, _ := l.State().NodeByID(nil, "c1"); c.Status != structs.NodeStatusReady {
		t.Fatalf("node without a lease exp: ready until its TTL got: %s", c.Status)
	}
}
