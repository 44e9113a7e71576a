package watcher

import (
	"context"
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

// recordingCSI stands in for the client nodes: it counts the detach calls
// the real attachment manager delivers, and fails node detaches on demand.
type recordingCSI struct {
	mu        sync.Mutex
	calls     []string
	nodeFails int
}

func (r *recordingCSI) Call(_ context.Context, _, method string, _ *structs.NodeRouting, args, _ any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch a := args.(type) {
	case *structs.ClientCSINodeDetachRequest:
		if r.nodeFails > 0 {
			r.nodeFails--
			r.calls = append(r.calls, "node-fail "+a.AllocID)
			return structs.NewError(structs.CodeUnavailable, "node plugin missing")
		}
		r.calls = append(r.calls, "node "+a.AllocID)
		return nil
	case *structs.ClientCSIControllerDetachRequest:
		r.calls = append(r.calls, "controller "+a.ExternalNodeID)
		return nil
	}
	return fmt.Errorf("unexpected node call %s", method)
}

func (r *recordingCSI) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// setup: one node running plugin p (controller required), one volume with a
// write claim by alloc a1 that is then reported complete (a past claim with
// a pending eval).
func setup(t *testing.T, l *fsmtest.Local) {
	t.Helper()
	info := &structs.CSIInfo{PluginID: "p", Healthy: true, RequiresControllerPlugin: true, ExternalNodeID: "ext-n1"}
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "n1", SecretID: "s", Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{"p": info}, CSIControllerPlugins: map[string]*structs.CSIInfo{"p": info},
	}, AutoAdmit: structs.AdmittedByACLDisabled})
	l.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{
		ID: "v1", ExternalID: "e1", PluginID: "p", AccessMode: structs.AccessModeSingleNodeWriter,
		AttachmentMode: structs.AttachmentModeFilesystem}}})
	l.Must(t, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{{
		ID: "a1", NodeID: "n1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}}})
	resp := l.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{{
		VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite}}}).(*structs.ClaimBatchResponse)
	if err := resp.Results[0].Err(); err != nil {
		t.Fatal(err)
	}
	l.Must(t, structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: "n1",
		Allocs: []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientComplete}}})
}

func freed(l *fsmtest.Local) error {
	v, _ := l.State().VolumeByID(nil, "v1")
	if v.HasClaims() {
		return fmt.Errorf("claims exp: none got: past=%v", v.PastClaims)
	}
	evals, _ := l.State().EvalsByStatus(nil, structs.EvalStatusPending)
	if len(evals) > 0 {
		return fmt.Errorf("pending evals exp: 0 got: %d", len(evals))
	}
	return nil
}

// startWatcher runs a leader's watcher over l with millisecond backoff,
// until the test ends, and returns the CSI calls it makes.
func startWatcher(t *testing.T, l *fsmtest.Local) *recordingCSI {
	t.Helper()
	csi := &recordingCSI{}
	w := New(Config{BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}, l, l, attachment.New(l, csi, fsmtest.HeldLease(), nil))
	w.SetEnabled(true)
	t.Cleanup(func() { w.SetEnabled(false) })
	return csi
}

func TestWatcher_NodeDetachThenControllerDetachThenFree(t *testing.T) {
	l := fsmtest.New()
	setup(t, l)
	csi := startWatcher(t, l)
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got, exp := fmt.Sprint(csi.log()), "[node a1 controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
}

func TestWatcher_FailedNodeDetachRetriesWithBackoffAndNeverDetachesController(t *testing.T) {
	l := fsmtest.New()
	setup(t, l)
	csi := &recordingCSI{nodeFails: 3}
	w := New(Config{BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond}, l, l, attachment.New(l, csi, fsmtest.HeldLease(), nil))
	w.SetEnabled(true)
	defer w.SetEnabled(false)
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	exp := "[node-fail a1 node-fail a1 node-fail a1 node a1 controller ext-n1]"
	if got := fmt.Sprint(csi.log()); got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
}

func TestWatcher_DisabledDoesNothingAndReEnableResumes(t *testing.T) {
	l := fsmtest.New()
	setup(t, l)
	csi := &recordingCSI{nodeFails: 1000}
	w := New(Config{BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond}, l, l, attachment.New(l, csi, fsmtest.HeldLease(), nil))
	w.SetEnabled(true)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if w.Status()["v1"].Attempts < 2 {
			return errors.New("no retries yet")
		}
		return nil
	})
	w.SetEnabled(false)
	n := len(csi.log())
	if st := w.Status(); len(st) != 0 {
		t.Fatalf("status after disable exp: empty got: %v", st)
	}
	// Disabled: no call may happen (an observation window is the only way
	// to see an absence).
	time.Sleep(50 * time.Millisecond)
	if m := len(csi.log()); m != n {
		t.Fatalf("calls while disabled exp: %d got: %d", n, m)
	}
	csi.mu.Lock()
	csi.nodeFails = 0
	csi.mu.Unlock()
	w.SetEnabled(true) // a new leader: re-scans the pending eval
	defer w.SetEnabled(false)
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
}

func TestBackoff_GrowsAndIsCapped(t *testing.T) {
	w := New(Config{BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second}, nil, nil, nil)
	for attempt, max := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 10: time.Second} {
		for i := 0; i < 50; i++ {
			d := w.backoff(attempt)
			if d < max/2 || d > max {
				t.Fatalf("backoff(%d) exp: in [%s, %s] got: %s", attempt, max/2, max, d)
			}
		}
	}
}

func TestWatcher_ReleasesEvalsThatBecomePendingAfterItStarted(t *testing.T) {
	l := fsmtest.New()
	csi := startWatcher(t, l)
	setup(t, l) // the pending eval is written after the watcher's first look
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	// A second release, after the watcher has moved past the first eval.
	l.Must(t, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{{
		ID: "a2", NodeID: "n1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}}})
	l.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{
		{VolumeID: "v1", AllocID: "a2", NodeID: "n1", Mode: structs.ClaimModeWrite},
		{VolumeID: "v1", AllocID: "a2", Release: true}}})
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got, exp := fmt.Sprint(csi.log()), "[node a1 controller ext-n1 node a2 controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
}

// A restore replaces the state store with one whose pending eval may have
// a lower index than any the watcher has seen: it must look from the start.
func TestWatcher_RestoredStateIsReadFromTheStart(t *testing.T) {
	l := fsmtest.New()
	for i := range 5 { // push the indexes of l's own entries above the snapshot's
		l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
			ID: fmt.Sprintf("other-%d", i), SecretID: "s", Status: structs.NodeStatusReady}})
	}
	setup(t, l)
	csi := startWatcher(t, l)
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })

	other := fsmtest.New()
	setup(t, other) // its pending eval has a lower ModifyIndex than l's had
	if err := l.RestoreFrom(other); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got, exp := fmt.Sprint(csi.log()), "[node a1 controller ext-n1 node a1 controller ext-n1]"; got != exp {
		t.Fatalf("calls exp: %s got: %s", exp, got)
	}
}
