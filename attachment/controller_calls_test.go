package attachment

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/structs"
)

// detachCluster: node plugin p on w1, its controller on c1 (admitted) with
// controller_calls set to calls, and n single-node-writer volumes, each
// with one past claim of w1 node-detached and waiting for its controller
// detach.
func detachCluster(t *testing.T, calls, n int) (*fsmtest.Local, []*structs.Volume) {
	t.Helper()
	l := fsmtest.New()
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "w1", SecretID: "s-w1", Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{
			"p": {PluginID: "p", Healthy: true, RequiresControllerPlugin: true, ExternalNodeID: "ext-w1"}}}})
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "c1", SecretID: "s-c1", Status: structs.NodeStatusReady, CSIControllerPlugins: map[string]*structs.CSIInfo{
			"p": {PluginID: "p", Healthy: true, RequiresControllerPlugin: true, ControllerCalls: calls}}},
		AutoAdmit: structs.AdmittedByACLDisabled})
	var vols []*structs.Volume
	var allocs []*structs.Alloc
	for i := range n {
		id := fmt.Sprintf("v%d", i)
		vols = append(vols, &structs.Volume{ID: id, ExternalID: "e" + id, PluginID: "p",
			AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem})
		allocs = append(allocs, &structs.Alloc{ID: "a" + id, NodeID: "w1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: id}}})
	}
	l.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: vols})
	l.Must(t, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: allocs})
	for _, v := range vols {
		claimReq := &structs.VolumeClaimRequest{VolumeID: v.ID, AllocID: "a" + v.ID, NodeID: "w1", Mode: structs.ClaimModeWrite}
		resp := l.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{claimReq}}).(*structs.ClaimBatchResponse)
		if err := resp.Results[0].Err(); err != nil {
			t.Fatalf("claim %s: %v", v.ID, err)
		}
		if _, _, err := l.Apply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
			VolumeID: v.ID, AllocID: "a" + v.ID, State: structs.ClaimStateTaken, ExpectedState: structs.ClaimStateTaken,
			ControllerPublished: true}); err != nil {
			t.Fatal(err)
		}
		l.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{{
			VolumeID: v.ID, AllocID: "a" + v.ID, Release: true}}})
		if _, _, err := l.Checkpoint(&structs.ClaimCheckpointRequest{VolumeID: v.ID, AllocID: "a" + v.ID,
			State: structs.ClaimStateNodeDetached, ExpectedState: structs.ClaimStateUnpublishing, NodeDetached: true}); err != nil {
			t.Fatalf("node detach %s: %v", v.ID, err)
		}
	}
	out := make([]*structs.Volume, 0, n)
	for _, v := range vols {
		fresh, err := l.State().VolumeByID(nil, v.ID)
		if err != nil || fresh == nil {
			t.Fatalf("volume %s: %v", v.ID, err)
		}
		out = append(out, fresh)
	}
	return l, out
}

// maxConcurrentDetaches runs every volume's controller detach at once,
// each held inside the controller call until all that may run have begun,
// and returns the most that ran at the same time.
func maxConcurrentDetaches(t *testing.T, calls, volumes, want int) int {
	t.Helper()
	l, vols := detachCluster(t, calls, volumes)
	var inside, most atomic.Int64
	gate := make(chan struct{})
	n := &nodes{answer: func(_, method string) error {
		if method != "ClientCSI.ControllerDetachVolume" {
			return nil
		}
		now := inside.Add(1)
		for {
			old := most.Load()
			if now <= old || most.CompareAndSwap(old, now) {
				break
			}
		}
		<-gate
		inside.Add(-1)
		return nil
	}}
	m := New(l, n, fsmtest.HeldLease(), nil)
	var wg sync.WaitGroup
	errs := make(chan error, len(vols))
	for _, v := range vols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- m.Unpublish(nil, v, v.PastClaims["a"+v.ID])
		}()
	}
	// Wait until the calls that may run are inside the controller and the
	// rest wait for a place, then let them all go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, waiting := m.plugins.counts("p")
		if inside.Load() == int64(want) && waiting == volumes-want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("controller detaches in flight, waiting exp: %d, %d got: %d, %d", want, volumes-want, inside.Load(), waiting)
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("unpublish: %v", err)
		}
	}
	return int(most.Load())
}

// A plugin whose controller says nothing gets one ControllerUnpublish at a
// time (decision 9); one configured with controller_calls = 4 gets four at
// once, never more (decision 57).
func TestUnpublish_ControllerCallsRunUpToThePluginsLimit(t *testing.T) {
	if got := maxConcurrentDetaches(t, 0, 4, 1); got != 1 {
		t.Errorf("controller detaches at once with no controller_calls exp: 1 got: %d", got)
	}
	if got := maxConcurrentDetaches(t, 4, 8, 4); got != 4 {
		t.Errorf("controller detaches at once with controller_calls = 4 exp: 4 got: %d", got)
	}
}

// The limit is the smallest setting among admitted controllers; one not
// admitted has no say.
func TestControllerCallLimit_SmallestAdmittedSettingWins(t *testing.T) {
	p := &structs.Plugin{ID: "p",
		Controllers: map[string]*structs.CSIInfo{"c1": {ControllerCalls: 8}, "c2": {ControllerCalls: 3}, "c3": {ControllerCalls: 1}},
		Admissions:  map[string]*structs.ControllerAdmission{"c1": {}, "c2": {}}}
	if got := p.ControllerCallLimit(); got != 3 {
		t.Errorf("limit with admitted 8 and 3 (and 1 not admitted) exp: 3 got: %d", got)
	}
	p.Controllers["c2"].ControllerCalls = 0
	if got := p.ControllerCallLimit(); got != 1 {
		t.Errorf("limit with an admitted controller that says nothing exp: 1 got: %d", got)
	}
	if got := (&structs.Plugin{ID: "p"}).ControllerCallLimit(); got != 1 {
		t.Errorf("limit without controllers exp: 1 got: %d", got)
	}
}

// Two detaches of one volume (its claims on two nodes) never overlap, even
// under a limit that lets other volumes' run together.
func TestPluginLocks_OneCallPerVolumeAtATime(t *testing.T) {
	var p pluginLocks
	first := p.lock("p", "v1", 4)
	other := p.lock("p", "v2", 4) // another volume: not held back
	second := make(chan func())
	go func() { second <- p.lock("p", "v1", 4) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, waiting := p.counts("p"); waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("second detach of v1 exp: waiting got: not waiting")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-second:
		t.Fatal("second detach of v1 exp: held until the first ends got: ran")
	default:
	}
	first()
	select {
	case unlock := <-second:
		unlock()
	case <-time.After(10 * time.Second):
		t.Fatal("second detach of v1 exp: runs once the first ended got: still waiting")
	}
	other()
	if inFlight, waiting := p.counts("p"); inFlight != 0 || waiting != 0 {
		t.Fatalf("after every call ended exp: 0 in flight, 0 waiting got: %d, %d", inFlight, waiting)
	}
}
