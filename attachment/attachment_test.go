package attachment

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/structs"
)

// nodes stands in for the client agents: it records every call the
// manager delivers (node and method) and answers from answer, if set.
type nodes struct {
	mu     sync.Mutex
	calls  []string
	args   []any
	answer func(node, method string) error
}

func (n *nodes) Call(_ context.Context, node, method string, _ *structs.NodeRouting, args, reply any) error {
	n.mu.Lock()
	n.calls = append(n.calls, node+" "+method)
	n.args = append(n.args, args)
	answer := n.answer
	n.mu.Unlock()
	if answer != nil {
		if err := answer(node, method); err != nil {
			return err
		}
	}
	if r, ok := reply.(*structs.ClientCSIControllerAttachResponse); ok {
		r.PublishContext = map[string]string{"device": "/dev/x-" + node}
	}
	return nil
}

func (n *nodes) log() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

// cluster: worker nodes w1 and w2 (node plugin p) and controller nodes c1
// and c2 (controller plugin p), volume v1 (single-node-writer, with a
// secret) and allocations a1, a2 on w1 and b1 on w2.
func cluster(t *testing.T) *fsmtest.Local {
	t.Helper()
	l := fsmtest.New()
	node := &structs.CSIInfo{PluginID: "p", Healthy: true, RequiresControllerPlugin: true}
	for _, id := range []string{"w1", "w2"} {
		info := *node
		info.ExternalNodeID = "ext-" + id
		l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
			ID: id, SecretID: "s-" + id, Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{"p": &info}}})
	}
	for _, id := range []string{"c1", "c2"} {
		l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
			ID: id, SecretID: "s-" + id, Status: structs.NodeStatusReady, CSIControllerPlugins: map[string]*structs.CSIInfo{"p": node}},
			AutoAdmit: structs.AdmittedByACLDisabled})
	}
	l.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{
		ID: "v1", ExternalID: "e1", PluginID: "p", AccessMode: structs.AccessModeMultiNodeReader,
		AttachmentMode: structs.AttachmentModeFilesystem, Secrets: structs.Secrets{"key": "s3cret"}}}})
	l.Must(t, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{
		{ID: "a1", NodeID: "w1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1", ReadOnly: true}}},
		{ID: "a2", NodeID: "w1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1", ReadOnly: true}}},
		{ID: "b1", NodeID: "w2", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1", ReadOnly: true}}},
	}})
	return l
}

// claim takes a read claim for alloc on node and returns it.
func claim(t *testing.T, l *fsmtest.Local, alloc, node string) *structs.Claim {
	t.Helper()
	resp := l.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{{
		VolumeID: "v1", AllocID: alloc, NodeID: node, Mode: structs.ClaimModeRead}}}).(*structs.ClaimBatchResponse)
	if err := resp.Results[0].Err(); err != nil {
		t.Fatalf("claim %s: %v", alloc, err)
	}
	return resp.Results[0].Claim
}

// recorder records a publish as the claim path does: a checkpoint with
// the publish context.
func recorder(t *testing.T, l *fsmtest.Local, c *structs.Claim) func(map[string]string) error {
	return func(pc map[string]string) error {
		_, _, err := l.Apply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
			VolumeID: c.VolumeID, AllocID: c.AllocID, State: structs.ClaimStateTaken, ExpectedState: structs.ClaimStateTaken,
			PublishContext: pc, ControllerPublished: true})
		return err
	}
}

func volume(t *testing.T, l *fsmtest.Local) *structs.Volume {
	t.Helper()
	v, err := l.State().VolumeByID(nil, "v1")
	if err != nil || v == nil {
		t.Fatalf("volume v1: %v %v", v, err)
	}
	return v
}

// A new claim is published by one healthy controller, with the volume's
// secrets, and recorded; a second claim on the same node shares the
// attachment (no second ControllerPublish); a claim already published is
// left alone.
func TestPublish_OneControllerCallPerNodeAttachment(t *testing.T) {
	l := cluster(t)
	n := &nodes{}
	m := New(l, n, fsmtest.HeldLease(), nil)
	noRelease := func() { t.Error("release exp: not called got: called") }

	a1 := claim(t, l, "a1", "w1")
	if _, err := m.Publish(a1, recorder(t, l, a1), noRelease); err != nil {
		t.Fatalf("publish a1: %v", err)
	}
	calls := n.log()
	if len(calls) != 1 || (calls[0] != "c1 ClientCSI.ControllerAttachVolume" && calls[0] != "c2 ClientCSI.ControllerAttachVolume") {
		t.Fatalf("calls exp: one ControllerAttach on a controller node got: %v", calls)
	}
	req := n.args[0].(*structs.ClientCSIControllerAttachRequest)
	if req.Secrets["key"] != "s3cret" || req.ExternalNodeID != "ext-w1" || !req.ReadOnly {
		t.Errorf("attach request exp: the volume's secrets, node ext-w1, read-only got: %+v", req)
	}
	if c := volume(t, l).LiveClaim("a1"); !c.ControllerPublished || c.PublishContext["device"] == "" {
		t.Fatalf("claim a1 exp: published with its context got: %+v", c)
	}

	a2 := claim(t, l, "a2", "w1")
	if _, err := m.Publish(a2, recorder(t, l, a2), noRelease); err != nil {
		t.Fatalf("publish a2: %v", err)
	}
	if got := len(n.log()); got != 1 {
		t.Errorf("controller calls after a second claim on the same node exp: 1 (shared attachment) got: %d", got)
	}
	if c := volume(t, l).LiveClaim("a2"); !c.ControllerPublished {
		t.Errorf("claim a2 exp: published (sharing a1's attachment) got: %+v", c)
	}

	again := volume(t, l).LiveClaim("a1")
	if _, err := m.Publish(again, func(map[string]string) error {
		t.Error("record exp: not called for a published claim got: called")
		return nil
	}, noRelease); err != nil {
		t.Fatal(err)
	}
}

// A controller that answers unavailable is passed over for the next; one
// that refuses is not (another controller of the same storage would refuse
// too), and the claim is released.
func TestPublish_ControllerFailover_AndReleaseOnRefusal(t *testing.T) {
	l := cluster(t)
	n := &nodes{}
	m := New(l, n, fsmtest.HeldLease(), nil)
	first := ""
	n.answer = func(node, method string) error {
		if first == "" {
			first = node
			return structs.NewError(structs.CodeUnavailable, "controller down")
		}
		return nil
	}
	b1 := claim(t, l, "b1", "w2")
	if _, err := m.Publish(b1, recorder(t, l, b1), func() { t.Error("release exp: not called got: called") }); err != nil {
		t.Fatalf("publish with one controller down exp: the other answers got: %v", err)
	}
	if calls := n.log(); len(calls) != 2 || calls[0] == calls[1] {
		t.Fatalf("calls exp: both controllers, the down one first got: %v", calls)
	}

	l2 := cluster(t)
	n2 := &nodes{answer: func(string, string) error { return structs.Invalid("capability", "not supported") }}
	m2 := New(l2, n2, fsmtest.HeldLease(), nil)
	a1 := claim(t, l2, "a1", "w1")
	released := false
	_, err := m2.Publish(a1, recorder(t, l2, a1), func() { released = true })
	if !errors.Is(err, structs.ErrInvalid) || !released {
		t.Fatalf("publish refused by the plugin exp: invalid, claim released got: %v, released %v", err, released)
	}
	if got := len(n2.log()); got != 1 {
		t.Errorf("controllers asked after a refusal exp: 1 got: %d", got)
	}
}

// Unpublish keeps an attachment a live claim on the node still uses (S4),
// waits for another past claim on the node to be node-detached first, and
// detaches (with the volume's secrets) once the node has no claim left
// that uses it.
func TestUnpublish_OnlyWhenNoClaimOnTheNodeUsesTheAttachment(t *testing.T) {
	l := cluster(t)
	n := &nodes{}
	m := New(l, n, fsmtest.HeldLease(), nil)
	for _, id := range []string{"a1", "a2"} {
		c := claim(t, l, id, "w1")
		if _, err := m.Publish(c, recorder(t, l, c), func() {}); err != nil {
			t.Fatal(err)
		}
	}
	release := func(alloc string) {
		l.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{{
			VolumeID: "v1", AllocID: alloc, Release: true}}})
	}
	nodeDetached := func(alloc string) {
		if _, _, err := l.Checkpoint(&structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: alloc,
			State: structs.ClaimStateNodeDetached, ExpectedState: structs.ClaimStateUnpublishing, NodeDetached: true}); err != nil {
			t.Fatalf("node detach %s: %v", alloc, err)
		}
	}
	detaches := func() int {
		k := 0
		for _, c := range n.log() {
			if c == "c1 ClientCSI.ControllerDetachVolume" || c == "c2 ClientCSI.ControllerDetachVolume" {
				k++
			}
		}
		return k
	}

	release("a1")
	nodeDetached("a1")
	v := volume(t, l)
	if err := m.Unpublish(nil, v, v.PastClaims["a1"]); err != nil {
		t.Fatalf("unpublish a1 while a2 lives on the node exp: nil (kept) got: %v", err)
	}
	if got := detaches(); got != 0 {
		t.Fatalf("controller detaches while a2 lives on w1 exp: 0 got: %d", got)
	}

	release("a2")
	v = volume(t, l)
	if err := m.Unpublish(nil, v, v.PastClaims["a1"]); err == nil {
		t.Fatalf("unpublish a1 while a2 is not node-detached exp: waiting error got: nil")
	}
	nodeDetached("a2")
	v = volume(t, l)
	if err := m.Unpublish(nil, v, v.PastClaims["a1"]); err != nil {
		t.Fatalf("unpublish a1 once no claim on w1 uses the attachment exp: detached got: %v", err)
	}
	if got := detaches(); got != 1 {
		t.Fatalf("controller detaches exp: 1 got: %d (%v)", got, n.log())
	}
	req := n.args[len(n.args)-1].(*structs.ClientCSIControllerDetachRequest)
	if req.ExternalNodeID != "ext-w1" || req.Secrets["key"] != "s3cret" {
		t.Errorf("detach request exp: node ext-w1 with the volume's secrets got: %+v", req)
	}

	// A volume the state no longer has (deregistered meanwhile).
	ghost := v.Copy()
	ghost.ID = "ghost"
	if err := m.Unpublish(nil, ghost, v.PastClaims["a1"]); !errors.Is(err, ErrVolumeDeregistered) {
		t.Errorf("unpublish of a deregistered volume exp: ErrVolumeDeregistered got: %v", err)
	}
}

// A named controller node must run a healthy controller of the plugin; a
// plugin without any healthy controller is unschedulable; node calls are
// validated before anything is sent.
func TestControllerCall_TargetsAndValidation(t *testing.T) {
	l := cluster(t)
	n := &nodes{}
	m := New(l, n, fsmtest.HeldLease(), nil)
	var reply structs.ClientCSIControllerDetachResponse
	req := &structs.ClientCSIControllerDetachRequest{CSIControllerQuery: structs.CSIControllerQuery{PluginID: "p", ControllerNodeID: "w1"}}
	err := m.ControllerCall("ClientCSI.ControllerDetachVolume", &req.CSIControllerQuery, &req.NodeRouting, req, &reply, func(string) {})
	if !errors.Is(err, structs.ErrInvalid) {
		t.Errorf("named node without a controller exp: invalid got: %v", err)
	}
	req.ControllerNodeID = "c2"
	answered := ""
	if err := m.ControllerCall("ClientCSI.ControllerDetachVolume", &req.CSIControllerQuery, &req.NodeRouting, req, &reply,
		func(node string) { answered = node }); err != nil || answered != "c2" {
		t.Errorf("named controller c2 exp: asked first and answered got: %q %v", answered, err)
	}
	if req.ControllerNodeID != "c2" {
		t.Errorf("request's named node after the call exp: restored to c2 got: %q", req.ControllerNodeID)
	}
	for _, id := range []string{"c1", "c2"} {
		l.Must(t, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: id, Status: structs.NodeStatusDown})
	}
	req.ControllerNodeID = ""
	err = m.ControllerCall("ClientCSI.ControllerDetachVolume", &req.CSIControllerQuery, &req.NodeRouting, req, &reply, func(string) {})
	if !errors.Is(err, structs.ErrUnschedulable) {
		t.Errorf("no healthy controller exp: unschedulable got: %v", err)
	}
	before := len(n.log())
	for _, bad := range []*structs.ClientCSINodeDetachRequest{
		{PluginID: "p", VolumeID: "v1", AllocID: "a1"},
		{NodeID: "w1", VolumeID: "v1", AllocID: "a1"},
		{NodeID: "w1", PluginID: "p", AllocID: "a1"},
		{NodeID: "w1", PluginID: "p", VolumeID: "v1"},
	} {
		if err := m.NodeDetach(nil, bad, &structs.ClientCSINodeDetachResponse{}); !errors.Is(err, structs.ErrInvalid) {
			t.Errorf("node detach %+v exp: invalid got: %v", bad, err)
		}
	}
	if got := len(n.log()); got != before {
		t.Errorf("calls sent for invalid node detaches exp: none got: %d", got-before)
	}
}

// A publish and an unpublish of the same (volume, node) never run at once:
// Publish waits for the lock an unpublish holds.
func TestPublish_WaitsForTheNodesLock(t *testing.T) {
	l := cluster(t)
	n := &nodes{}
	m := New(l, n, fsmtest.HeldLease(), nil)
	a1 := claim(t, l, "a1", "w1")
	unlock := m.locks.Lock("v1", "w1")
	done := make(chan error, 1)
	go func() {
		_, err := m.Publish(a1, recorder(t, l, a1), func() {})
		done <- err
	}()
	// Wait until the publish is queued on the lock (the lock counts its
	// holder and its waiters), then check it has called nothing.
	deadline := time.Now().Add(10 * time.Second)
	for m.locks.waiters("v1", "w1") < 2 {
		select {
		case err := <-done:
			t.Fatalf("publish exp: waiting for the lock got: returned %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("publish exp: queued on the node's lock within 10 s got: not queued")
		}
		runtime.Gosched()
	}
	if got := n.log(); len(got) != 0 {
		t.Fatalf("controller calls while the node's lock is held exp: none got: %v", got)
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("publish after the lock is released: %v", err)
	}
	if got := len(n.log()); got != 1 {
		t.Fatalf("controller calls after the lock exp: 1 got: %d", got)
	}
}

// An orphan is detached only while no claim is on its node and the node,
// asked first, has the volume mounted for no allocation: a claim there, in
// any state, or a mount the record does not explain (a snapshot restore
// made the record older than the node) means it is not an orphan.
func TestDetachOrphan_RefusedUnderAClaimOrAMount(t *testing.T) {
	l := cluster(t)
	n := &nodes{}
	m := New(l, n, fsmtest.HeldLease(), nil)
	vol, _ := l.State().VolumeByID(nil, "v1")
	if err := m.DetachOrphan(vol, "w2", "ext-w2"); err != nil {
		t.Fatalf("orphan on w2 with no claim exp: detached got: %v", err)
	}
	calls := n.log()
	if len(calls) != 2 || calls[0] != "w2 ClientCSI.NodeHeldVolume" ||
		calls[1] != "c1 ClientCSI.ControllerDetachVolume" && calls[1] != "c2 ClientCSI.ControllerDetachVolume" {
		t.Fatalf("calls exp: the node asked, then one controller detach got: %v", calls)
	}
	if a := n.args[1].(*structs.ClientCSIControllerDetachRequest); a.ExternalNodeID != "ext-w2" || a.ExternalID != "e1" {
		t.Fatalf("detach exp: e1 from ext-w2 got: %+v", a)
	}

	// w2 says it has v1 mounted: no controller call.
	held := &nodes{}
	mh := New(l, heldBy(held, "a9"), fsmtest.HeldLease(), nil)
	err := mh.DetachOrphan(vol, "w2", "ext-w2")
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "a9") {
		t.Fatalf("orphan mounted on its node exp: conflict naming a9 got: %v", err)
	}
	if got := held.log(); len(got) != 1 || got[0] != "w2 ClientCSI.NodeHeldVolume" {
		t.Fatalf("calls exp: only the question to w2 got: %v", got)
	}

	claim(t, l, "a1", "w1")
	vol, _ = l.State().VolumeByID(nil, "v1")
	err = m.DetachOrphan(vol, "w1", "ext-w1")
	if !errors.Is(err, structs.ErrConflict) || len(n.log()) != 2 {
		t.Fatalf("orphan on a node with a claim exp: conflict, no call got: %v, %v", err, n.log())
	}
	if err := m.DetachOrphan(vol, "", ""); !errors.Is(err, structs.ErrInvalid) {
		t.Fatalf("no node exp: invalid got: %v", err)
	}
}

// heldBy is n answering NodeHeldVolume with allocs.
func heldBy(n *nodes, allocs ...string) NodeCaller {
	return heldNodes{n, allocs}
}

type heldNodes struct {
	*nodes
	allocs []string
}

func (h heldNodes) Call(ctx context.Context, node, method string, r *structs.NodeRouting, args, reply any) error {
	if out, ok := reply.(*structs.ClientCSINodeHeldResponse); ok {
		out.Allocs = h.allocs
	}
	return h.nodes.Call(ctx, node, method, r, args, reply)
}
