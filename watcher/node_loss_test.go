package watcher

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/attachment"
	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// manualLeases is a lease clock the test moves by hand.
type manualLeases struct {
	mu      sync.Mutex
	at      time.Time
	expired bool
	asked   int
}

func (m *manualLeases) LeaseExpiry(string, time.Duration) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked++
	return m.at, m.expired
}

func (m *manualLeases) set(at time.Time, expired bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.at, m.expired = at, expired
}

// setupLost: as setup, but the volume has the given node_lost policy, the
// node holds a lease, and the node is then marked down (its alloc lost,
// the claim past), instead of the alloc completing.
func setupLost(t *testing.T, l *fsmtest.Local, policy structs.NodeLostPolicy) {
	t.Helper()
	setupLeaseClaim(t, l, policy)
	l.Must(t, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown})
}

// setupLeaseClaim: node n1 holds a 5 s lease and a live write claim of
// alloc a1 on v1 (node_lost policy), with a controller on c1.
func setupLeaseClaim(t *testing.T, l *fsmtest.Local, policy structs.NodeLostPolicy) {
	t.Helper()
	info := &structs.CSIInfo{PluginID: "p", Healthy: true, RequiresControllerPlugin: true, ExternalNodeID: "ext-n1"}
	ctrl := &structs.CSIInfo{PluginID: "p", Healthy: true, RequiresControllerPlugin: true}
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "n1", SecretID: "s", Status: structs.NodeStatusReady, Lease: 5 * time.Second,
		CSINodePlugins: map[string]*structs.CSIInfo{"p": info}}})
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "c1", SecretID: "s", Status: structs.NodeStatusReady,
		CSIControllerPlugins: map[string]*structs.CSIInfo{"p": ctrl}}, AutoAdmit: structs.AdmittedByACLDisabled})
	l.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{
		ID: "v1", ExternalID: "e1", PluginID: "p", AccessMode: structs.AccessModeSingleNodeWriter,
		AttachmentMode: structs.AttachmentModeFilesystem, NodeLost: policy}}})
	l.Must(t, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{{
		ID: "a1", NodeID: "n1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}}})
	resp := l.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{{
		VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite}}}).(*structs.ClaimBatchResponse)
	if err := resp.Results[0].Err(); err != nil {
		t.Fatal(err)
	}
}

func startLeaseWatcher(t *testing.T, l *fsmtest.Local, leases LeaseClock) (*Watcher, *recordingCSI) {
	t.Helper()
	csi := &recordingCSI{}
	w := New(Config{BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}, l, l, attachment.New(l, csi, fsmtest.HeldLease(), nil))
	w.SetLeases(leases)
	w.SetEnabled(true)
	t.Cleanup(func() { w.SetEnabled(false) })
	return w, csi
}

// waitAttempts returns once the watcher has failed v1's release n times:
// enough passes that a wrongful step would have happened.
func waitAttempts(t *testing.T, w *Watcher, n int) structs.ReleaseStatus {
	t.Helper()
	var st structs.ReleaseStatus
	testutil.WaitFor(t, 5*time.Second, func() error {
		st = w.Status()["v1"]
		if st.Attempts < n {
			return fmt.Errorf("attempts exp: ≥%d got: %d (%s)", n, st.Attempts, st.LastError)
		}
		return nil
	})
	return st
}

func TestWatcher_FencePolicyWaitsForTheLeaseThenSkipsOnlyTheNodeDetach(t *testing.T) {
	l := fsmtest.New()
	setupLost(t, l, structs.NodeLostFence)
	leases := &manualLeases{}
	runsOut := time.Now().Add(time.Hour)
	leases.set(runsOut, false)
	w, csi := startLeaseWatcher(t, l, leases)
	st := waitAttempts(t, w, 1)
	if !st.LeaseExpiresAt.Equal(runsOut) {
		t.Fatalf("release status exp: lease expiry %s got: %+v", runsOut, st)
	}
	if calls := csi.log(); len(calls) != 0 {
		t.Fatalf("exp: nothing detached while the lease runs got: %v", calls)
	}
	v, _ := l.State().VolumeByID(nil, "v1")
	if c := v.PastClaims["a1"]; c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("exp: claim waits in unpublishing got: %+v", v.PastClaims)
	}

	ranOut := time.Now().Add(-time.Second).Round(0).UTC()
	leases.set(ranOut, true)
	// The wait's retry was scheduled for the hour-away expiry, capped by
	// the backoff: the next pass sees the lease gone.
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got, exp := fmt.Sprint(csi.log()), "[controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s (no node detach) got: %s", exp, got)
	}
	v, _ = l.State().VolumeByID(nil, "v1")
	if len(v.Released) != 1 {
		t.Fatalf("exp: one released claim got: %+v", v.Released)
	}
	c := v.Released[0]
	if !c.Fenced || !c.LeaseExpiredAt.Equal(ranOut) || c.ReleasePath() != structs.ReleasePathFenced {
		t.Fatalf("exp: released through the fence path at %s got: %+v", ranOut, c)
	}
}

func TestWatcher_WaitPolicyNeverSkipsTheNodeDetach(t *testing.T) {
	l := fsmtest.New()
	setupLost(t, l, structs.NodeLostWait)
	leases := &manualLeases{}
	leases.set(time.Now().Add(-time.Hour), true) // long run out: irrelevant under wait
	w, csi := startLeaseWatcher(t, l, leases)
	waitAttempts(t, w, 3)
	if calls := csi.log(); len(calls) != 0 {
		t.Fatalf("exp: no detach of a down node's claim got: %v", calls)
	}
	// The node comes back: its node detach runs, then the controller's.
	l.Must(t, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady})
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got, exp := fmt.Sprint(csi.log()), "[node a1 controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
}

func TestWatcher_FencePolicyWithoutANodeLeaseWaits(t *testing.T) {
	l := fsmtest.New()
	setupLost(t, l, structs.NodeLostFence)
	// The agent re-registered without a lease before it was lost.
	n, _ := l.State().NodeByID(nil, "n1")
	n = n.Copy()
	n.Lease = 0
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n})
	leases := &manualLeases{}
	leases.set(time.Now().Add(-time.Hour), true)
	w, csi := startLeaseWatcher(t, l, leases)
	st := waitAttempts(t, w, 3)
	if calls := csi.log(); len(calls) != 0 {
		t.Fatalf("exp: nothing detached got: %v (%s)", calls, st.LastError)
	}
}

func TestWatcher_ManualPolicyWaitsForTheOperatorEvenWhenTheNodeIsBack(t *testing.T) {
	l := fsmtest.New()
	setupLost(t, l, structs.NodeLostManual)
	w, csi := startLeaseWatcher(t, l, &manualLeases{})
	waitAttempts(t, w, 2)
	l.Must(t, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady})
	before := w.Status()["v1"].Attempts
	waitAttempts(t, w, before+3)
	if calls := csi.log(); len(calls) != 0 {
		t.Fatalf("exp: nothing detached without the operator got: %v", calls)
	}
	// The operator's go-ahead (what `volume detach` records): the node is
	// back, so its node detach runs first.
	l.Must(t, structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateUnpublishing, ExpectedState: structs.ClaimStateUnpublishing, OperatorReleased: true})
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got, exp := fmt.Sprint(csi.log()), "[node a1 controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
}

func TestHeartbeats_LeaseCountsFromTheLastHeartbeatOrTheLeadersStart(t *testing.T) {
	l := fsmtest.New()
	h := NewHeartbeats(l, l, time.Hour, time.Hour, nil)
	if at, expired := h.LeaseExpiry("n1", 5*time.Second); !at.IsZero() || expired {
		t.Fatalf("follower: exp: no lease clock got: %s %v", at, expired)
	}
	start := time.Now()
	h.SetEnabled(true)
	defer h.SetEnabled(false)
	at, expired := h.LeaseExpiry("n1", 5*time.Second)
	if expired || at.Before(start.Add(structs.LeaseExpiry(5*time.Second))) {
		t.Fatalf("unheard node: exp: counted from the leader's start got: %s %v", at, expired)
	}
	old := time.Now().Add(-time.Minute)
	h.Received("n1", old)
	at, expired = h.LeaseExpiry("n1", 5*time.Second)
	if !expired || !at.Equal(old.Add(structs.LeaseExpiry(5*time.Second))) {
		t.Fatalf("exp: run out a minute after an old heartbeat got: %s %v", at, expired)
	}
	// An earlier receive time never moves the clock back.
	h.Received("n1", old.Add(-time.Hour))
	if at2, _ := h.LeaseExpiry("n1", 5*time.Second); !at2.Equal(at) {
		t.Fatalf("exp: clock kept got: %s", at2)
	}
	h.Received("n1", time.Now())
	if _, expired = h.LeaseExpiry("n1", 5*time.Second); expired {
		t.Fatal("exp: renewed lease not run out")
	}
	// A new term forgets what the last one heard: counting starts afresh.
	h.SetEnabled(false)
	h.SetEnabled(true)
	if _, expired = h.LeaseExpiry("n1", 5*time.Second); expired {
		t.Fatal("exp: new leader's clock starts at its start")
	}
}

func TestLeaseArithmetic_ServersWaitAtLeastTheLeaseOnTheirSlowestClockAndAgentsStopWithinIt(t *testing.T) {
	for _, lease := range []time.Duration{structs.MinNodeLease, 6 * time.Second, 30 * time.Second, structs.MaxNodeLease} {
		// Server: its clock may run fast by ρ, so its wait in real time is
		// LeaseExpiry/(1+ρ), which must cover the lease plus some margin.
		serverReal := float64(structs.LeaseExpiry(lease)) / (1 + structs.LeaseClockDrift)
		// Agent: its clock may run slow by ρ, so its deadline in real time
		// is FenceDeadline/(1−ρ), which must not pass the lease.
		agentReal := float64(structs.FenceDeadline(lease)) / (1 - structs.LeaseClockDrift)
		if !(agentReal <= float64(lease)+1 && serverReal >= float64(lease)+float64(structs.LeaseMargin)/(1+structs.LeaseClockDrift)-1) {
			t.Fatalf("lease %s: exp: agent done by %s ≤ lease < server acts at %s", lease, time.Duration(agentReal), time.Duration(serverReal))
		}
	}
}

// Only a release that waits for nothing but leases is logged quietly.
func TestOnlyLeaseWaits(t *testing.T) {
	lw := &leaseWait{node: "n1", at: time.Now()}
	wrapped := fmt.Errorf("alloc a1 on node n1: node detach: %w", lw)
	if !onlyLeaseWaits(wrapped) || !onlyLeaseWaits(errors.Join(wrapped, wrapped)) {
		t.Fatal("lease waits exp: recognised got: not")
	}
	if onlyLeaseWaits(errors.Join(wrapped, errors.New("controller detach: unavailable"))) || onlyLeaseWaits(errors.New("x")) {
		t.Fatal("a real failure beside a lease wait exp: not only lease waits got: only")
	}
}
