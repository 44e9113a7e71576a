package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"pgregory.net/rapid"

	"github.com/claimd/claimd/structs"
)

// A small universe, so that random commands collide often.
var (
	propVols   = []string{"v0", "v1", "v2"}
	propNodes  = []string{"n0", "n1"}
	propAllocs = []string{"a0", "a1", "a2", "a3", "a4"}
)

// propRun is one random command sequence: the FSM under test, a twin fed
// the same log (S2), the reference model, and what the previous step saw.
type propRun struct {
	t        *rapid.T
	f, twin  *FSM
	index    uint64
	m        *model
	prev     map[claimKey]structs.ClaimState
	nextEval int
	// held are the objects read at the last check, with their encoding.
	held map[any][]byte
	// allocIDs starts as propAllocs and grows by placeNew, so that claims
	// keep happening after the first allocs are terminal.
	allocIDs []string
	// at, when set, is the leader's append time of the entry at an index
	// (raft.Log.AppendedAt); without it entries have none.
	at func(index uint64) time.Time
	// log is every entry applied, for replaying it.
	log []loggedEntry
	// restarted: the twin was restored from a snapshot, so its results
	// hold times as decoded (UTC) where f's hold them as appended; they
	// are compared by encoding.
	restarted bool
}

type loggedEntry struct {
	index uint64
	at    time.Time
	data  []byte
}

// setup registers every volume and node and places the first allocs, so
// that the random steps start from a state where claims can succeed.
func (r *propRun) setup(t *rapid.T) {
	r.allocIDs = append([]string(nil), propAllocs...)
	for _, id := range propVols {
		r.registerVolumeID(t, id)
	}
	for _, id := range propNodes {
		r.registerNodeID(t, id)
	}
	for _, id := range propAllocs {
		r.placeID(t, id)
	}
	r.check(t)
}

// rarely skips most draws of a destructive action, which would otherwise
// empty the small universe before anything interesting happens.
func (r *propRun) rarely(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "rarely") > 0 {
		t.Skip("rare action")
	}
}

func (r *propRun) drawAlloc(t *rapid.T) string {
	return rapid.SampledFrom(r.allocIDs).Draw(t, "alloc")
}

type claimKey struct {
	vol, alloc  string
	createIndex uint64
}

// TestClaimStateMachine_Properties drives random command sequences and
// checks after every step: the outcome matches the reference model; S1
// claim limits hold (past claims included); checkpoints only moved forward
// (S7); terminal allocs hold no live claims and every past claim has a
// pending (or permanently failed) eval; and the twin FSM fed the same log
// returned the same results. At the end, both FSMs' snapshots are byte-
// identical (S2) and snapshot → restore → snapshot is the identity.
func TestClaimStateMachine_Properties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &propRun{t: t, f: New(nil), twin: New(nil), m: newModel(), prev: map[claimKey]structs.ClaimState{}}
		r.setup(t)
		t.Repeat(map[string]func(*rapid.T){
			"registerVolume":   r.registerVolume,
			"deregisterVolume": r.deregisterVolume,
			"registerNode":     r.registerNode,
			"nodeDown":         r.nodeDown,
			"deregisterNode":   r.deregisterNode,
			"place":            r.place,
			"placeNew":         r.placeNew,
			"stop":             r.stop,
			"clientUpdate":     r.clientUpdate,
			"claimBatch":       r.claimBatch,
			// Claims and checkpoints are the point: draw them more often.
			"claimBatch2":  r.claimBatch,
			"claimBatch3":  r.claimBatch,
			"checkpoint":   r.checkpoint,
			"checkpoint2":  r.checkpoint,
			"upsertEval":   r.upsertEval,
			"completeEval": r.completeEval,
			"":             r.check,
		})
		r.checkSnapshots()
	})
}

// apply sends one entry to both FSMs and returns the result, failing when
// the two disagree.
func (r *propRun) apply(mt structs.MessageType, req any) any {
	data, err := structs.Encode(mt, req)
	if err != nil {
		r.t.Fatalf("encode: %v", err)
	}
	r.index++
	var at time.Time
	if r.at != nil {
		at = r.at(r.index)
	}
	r.log = append(r.log, loggedEntry{index: r.index, at: at, data: data})
	got := r.f.applyAt(r.index, at, data)
	twin := r.twin.applyAt(r.index, at, data)
	if r.restarted && !bytes.Equal(canonical(got), canonical(twin)) || !r.restarted && !reflect.DeepEqual(got, twin) {
		r.t.Fatalf("S2: same entry, different results: exp: %#v got: %#v", got, twin)
	}
	return got
}

func codeOf(resp any) structs.ErrorCode {
	err, ok := resp.(error)
	if !ok {
		return okCode
	}
	var ce *structs.CodedError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return "uncoded: " + structs.ErrorCode(err.Error())
}

func (r *propRun) expect(what string, want structs.ErrorCode, resp any) {
	if got := codeOf(resp); got != want {
		r.t.Fatalf("%s: exp: %q got: %q (%v)", what, want, got, resp)
	}
}

func (r *propRun) registerVolume(t *rapid.T) {
	r.registerVolumeID(t, rapid.SampledFrom(propVols).Draw(t, "vol"))
}

func (r *propRun) registerVolumeID(t *rapid.T, id string) {
	mode := rapid.SampledFrom(structs.AccessModes).Draw(t, "mode")
	resp := r.apply(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume(id, mode)}})
	r.expect("register "+id, r.m.registerVolume(id, mode), resp)
}

func (r *propRun) deregisterVolume(t *rapid.T) {
	r.rarely(t)
	id := rapid.SampledFrom(propVols).Draw(t, "vol")
	force := rapid.Bool().Draw(t, "force")
	resp := r.apply(structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{id}, Force: force})
	r.expect("deregister "+id, r.m.deregisterVolume(id, force), resp)
}

func (r *propRun) registerNode(t *rapid.T) {
	r.registerNodeID(t, rapid.SampledFrom(propNodes).Draw(t, "node"))
}

func (r *propRun) registerNodeID(t *rapid.T, id string) {
	healthy := rapid.IntRange(0, 3).Draw(t, "health") > 0
	// A small limit, or none, so that random claims hit it often.
	maxVols := rapid.IntRange(0, 2).Draw(t, "max_volumes")
	// Whether the plugin takes the CSI 1.5 single-node modes.
	snmw := rapid.IntRange(0, 3).Draw(t, "snmw") > 0
	// Rarely a plugin that needs a controller detach: a claim its node
	// detached itself then stops at node-detached.
	needsController := rapid.IntRange(0, 5).Draw(t, "needs_controller") == 0
	n := testNode(id)
	n.CSINodePlugins["hostdir"].RequiresControllerPlugin = needsController
	n.CSINodePlugins["hostdir"].Healthy = healthy
	n.CSINodePlugins["hostdir"].MaxVolumes = int64(maxVols)
	n.CSINodePlugins["hostdir"].NodeCapabilities = &structs.CSINodeCapabilities{SingleNodeMultiWriter: snmw}
	resp := r.apply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n})
	r.expect("register node "+id, r.m.registerNode(id, healthy, maxVols, snmw, needsController), resp)
}

func (r *propRun) nodeDown(t *rapid.T) {
	r.rarely(t)
	id := rapid.SampledFrom(propNodes).Draw(t, "node")
	resp := r.apply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: id, Status: structs.NodeStatusDown})
	r.expect("node down "+id, r.m.nodeDown(id, r.index), resp)
}

func (r *propRun) deregisterNode(t *rapid.T) {
	r.rarely(t)
	id := rapid.SampledFrom(propNodes).Draw(t, "node")
	resp := r.apply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{id}})
	r.expect("deregister node "+id, r.m.deregisterNode(id, r.index), resp)
}

func (r *propRun) placeNew(t *rapid.T) {
	if len(r.allocIDs) >= 20 {
		t.Skip("enough allocs")
	}
	r.allocIDs = append(r.allocIDs, fmt.Sprintf("a%d", len(r.allocIDs)))
	r.placeID(t, r.allocIDs[len(r.allocIDs)-1])
}

func (r *propRun) place(t *rapid.T) { r.placeID(t, r.drawAlloc(t)) }

func (r *propRun) placeID(t *rapid.T, id string) {
	node := rapid.SampledFrom(propNodes).Draw(t, "node")
	ids := rapid.SliceOfNDistinct(rapid.SampledFrom(propVols), 1, 2, func(s string) string { return s }).Draw(t, "vols")
	var vols []*structs.AllocVolumeRequest
	for _, v := range ids {
		vols = append(vols, &structs.AllocVolumeRequest{VolumeID: v, ReadOnly: rapid.IntRange(0, 4).Draw(t, "ro") == 0})
	}
	a := &structs.Alloc{ID: id, NodeID: node, Volumes: vols}
	resp := r.apply(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{a}})
	r.expect("place "+id, r.m.place(id, node, a.Copy().Volumes), resp)
}

func (r *propRun) stop(t *rapid.T) {
	id := r.drawAlloc(t)
	resp := r.apply(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: []string{id}})
	r.expect("stop "+id, r.m.stop(id), resp)
}

// clientUpdate is a node's status report: without a node (as the earliest
// tests had it), or from a node that may say which volumes it detached
// itself (decision 61). Only type-30 entries honour that; type 8 ignores
// it, as a server older than the statement does.
func (r *propRun) clientUpdate(t *rapid.T) {
	id := r.drawAlloc(t)
	status := rapid.SampledFrom(structs.AllocClientStatuses).Draw(t, "status")
	u := &structs.AllocClientUpdate{ID: id, ClientStatus: status}
	req := &structs.AllocClientUpdateRequest{Allocs: []*structs.AllocClientUpdate{u}}
	mt := structs.AllocClientUpdateRequestType
	var honoured []string
	if a := r.m.allocs[id]; a != nil && rapid.Bool().Draw(t, "from_node") {
		req.NodeID = a.node
		if rapid.IntRange(0, 9).Draw(t, "wrongNode") == 0 {
			req.NodeID = rapid.SampledFrom(propNodes).Draw(t, "node")
		}
		u.DetachedVolumes = rapid.SliceOfDistinct(rapid.SampledFrom(propVols), func(s string) string { return s }).Draw(t, "detached")
		if rapid.IntRange(0, 3).Draw(t, "old_type") > 0 {
			mt, honoured = structs.AllocClientUpdateDetachedRequestType, u.DetachedVolumes
		}
	}
	resp := r.apply(mt, req)
	r.expect("client update "+id, r.m.clientUpdate(id, status, r.index, req.NodeID, honoured), resp)
}

func (r *propRun) claimBatch(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "items")
	reqs := make([]*structs.VolumeClaimRequest, n)
	for i := range reqs {
		alloc := r.drawAlloc(t)
		node, vol := "n0", rapid.SampledFrom(propVols).Draw(t, "vol")
		if a := r.m.allocs[alloc]; a != nil {
			node = a.node
			// Mostly a volume the alloc asked for, or nearly every claim
			// would be refused for that.
			if rapid.IntRange(0, 4).Draw(t, "requested") > 0 {
				vol = rapid.SampledFrom(a.vols).Draw(t, "request").VolumeID
			}
		}
		if rapid.IntRange(0, 9).Draw(t, "wrongNode") == 0 {
			node = rapid.SampledFrom(propNodes).Draw(t, "node")
		}
		reqs[i] = &structs.VolumeClaimRequest{
			VolumeID: vol,
			AllocID:  alloc, NodeID: node,
			Mode:    rapid.SampledFrom([]structs.ClaimMode{structs.ClaimModeRead, structs.ClaimModeWrite}).Draw(t, "mode"),
			Release: rapid.IntRange(0, 3).Draw(t, "release") == 0,
		}
		// A release may carry the holder's statement (decision 61): about
		// the claim it holds, or (rarely) about an earlier one.
		if reqs[i].Release && rapid.Bool().Draw(t, "node_detached") {
			reqs[i].NodeDetached = true
			if c := r.m.claims[vol][alloc]; c != nil {
				reqs[i].ClaimIndex = c.taken
			}
			if rapid.IntRange(0, 5).Draw(t, "stale_index") == 0 {
				reqs[i].ClaimIndex = uint64(rapid.IntRange(0, int(r.index)).Draw(t, "claim_index"))
			}
		}
	}
	// Type 29 honours the statements; type 9 ignores them, as a server
	// older than them does.
	mt := structs.ClaimBatchRequestType
	if rapid.Bool().Draw(t, "detached_type") {
		mt = structs.ClaimBatchDetachedRequestType
	}
	resp := r.apply(mt, &structs.ClaimBatchRequest{Claims: reqs})
	br, ok := resp.(*structs.ClaimBatchResponse)
	if !ok || len(br.Results) != n {
		t.Fatalf("claim batch: exp: %d results got: %#v", n, resp)
	}
	for i, req := range reqs {
		if mt == structs.ClaimBatchRequestType {
			q := *req
			q.NodeDetached = false
			req = &q
		}
		want, wantNew := r.m.claim(req, r.index)
		res := br.Results[i]
		got := okCode
		if res.Error != nil {
			got = res.Error.Code
		}
		if got != want || res.New != wantNew {
			t.Fatalf("claim item %d %+v: exp: %q new=%v got: %q new=%v (%v)", i, req, want, wantNew, got, res.New, res.Err())
		}
	}
}

func (r *propRun) checkpoint(t *rapid.T) {
	req := &structs.ClaimCheckpointRequest{
		VolumeID: rapid.SampledFrom(propVols).Draw(t, "vol"),
		AllocID:  r.drawAlloc(t),
		State:    rapid.SampledFrom(structs.ClaimStates).Draw(t, "state"),
		// Mostly unforced and without compare-and-set, like the watcher.
		ForcedSkip:   rapid.IntRange(0, 3).Draw(t, "force") == 0,
		NodeDetached: rapid.IntRange(0, 2).Draw(t, "node_detached") == 0,
	}
	if rapid.Bool().Draw(t, "cas") {
		req.ExpectedState = rapid.SampledFrom(structs.ClaimStates).Draw(t, "expected")
	}
	resp := r.apply(structs.ClaimCheckpointRequestType, req)
	r.expect(fmt.Sprintf("checkpoint %+v", req), r.m.checkpoint(req, r.index), resp)
}

func (r *propRun) upsertEval(t *rapid.T) {
	r.nextEval++
	id := fmt.Sprintf("op-%d", r.nextEval)
	vol := rapid.SampledFrom(propVols).Draw(t, "vol")
	resp := r.apply(structs.EvalUpsertRequestType, &structs.EvalUpsertRequest{Evals: []*structs.Eval{
		{ID: id, Type: structs.EvalTypeVolumeClaimGC, VolumeID: vol, TriggeredBy: structs.EvalTriggerOperator}}})
	r.expect("upsert eval "+id, r.m.upsertEval(id, vol, r.index), resp)
}

func (r *propRun) completeEval(t *rapid.T) {
	ids := append(structs.SortedKeys(r.m.evals), "nope")
	id := rapid.SampledFrom(ids).Draw(t, "eval")
	status := structs.EvalStatusComplete
	if rapid.IntRange(0, 5).Draw(t, "fail") == 0 {
		status = structs.EvalStatusFailed
	}
	req := &structs.EvalCompleteRequest{EvalID: id, Status: status}
	// The watcher names the eval's volume; an entry from before the field
	// did not, and the eval is searched for: both must find the same.
	if e := r.m.evals[id]; e != nil && rapid.Bool().Draw(t, "name volume") {
		req.VolumeID = e.vol
	}
	resp := r.apply(structs.EvalCompleteRequestType, req)
	r.expect("complete eval "+id, r.m.completeEval(id, status), resp)
}

// check runs after every step.
func (r *propRun) check(t *rapid.T) {
	s := r.f.State()
	vols, _ := s.Volumes(nil, "")
	allocs, _ := s.Allocs(nil)
	evals, _ := s.Evals(nil)
	nodes, _ := s.Nodes(nil)
	allocByID := map[string]*structs.Alloc{}
	for _, a := range allocs {
		allocByID[a.ID] = a
	}
	gcByVol := map[string]bool{}
	for _, e := range evals {
		if e.Status == structs.EvalStatusPending || e.Status == structs.EvalStatusFailed {
			gcByVol[e.VolumeID] = true
		}
	}

	seen := map[claimKey]structs.ClaimState{}
	for _, v := range vols {
		checkS1(t, v)
		checkClaimMaps(t, v)
		if len(v.PastClaims) > 0 && !gcByVol[v.ID] {
			t.Fatalf("volume %s has past claims: exp: a pending eval got: none", v.ID)
		}
		for _, c := range v.AllClaims() {
			a := allocByID[c.AllocID]
			if c.State == structs.ClaimStateTaken && (a == nil || a.Terminal() || a.NodeID != c.NodeID) {
				t.Fatalf("live claim %v: exp: a live alloc on its node got: %+v", c, a)
			}
			k := claimKey{c.VolumeID, c.AllocID, c.CreateIndex}
			if was, ok := r.prev[k]; ok && c.State.Rank() < was.Rank() {
				t.Fatalf("S7 %v: exp: state at or after %s got: %s", c, was, c.State)
			}
			seen[k] = c.State
		}
	}
	r.prev = seen
	r.compareWithModel(t, vols, allocs, evals, nodes)
	r.checkNotMutated(t, vols, allocs, evals, nodes)
}

// checkNotMutated proves the copy discipline: every object a reader got
// at the previous step must still encode as it did then, whatever the
// entries since changed. A handler that edits a stored object in place
// (instead of a copy) fails here.
func (r *propRun) checkNotMutated(t *rapid.T, vols []*structs.Volume, allocs []*structs.Alloc, evals []*structs.Eval, nodes []*structs.Node) {
	for obj, was := range r.held {
		if now := canonical(obj); !bytes.Equal(was, now) {
			t.Fatalf("copy discipline: exp: object read earlier unchanged got: mutated in place, now %#v", obj)
		}
	}
	plugins, _ := r.f.State().Plugins(nil)
	r.held = map[any][]byte{}
	for _, objs := range [][]any{anys(vols), anys(allocs), anys(evals), anys(nodes), anys(plugins)} {
		for _, o := range objs {
			r.held[o] = canonical(o)
		}
	}
}

// canonical encodes with sorted map keys, so equal objects give equal bytes.
func canonical(v any) []byte {
	var out []byte
	if err := codec.NewEncoderBytes(&out, snapshotHandle).Encode(v); err != nil {
		panic(err)
	}
	return out
}

func anys[T any](in []*T) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

// checkS1 is the access-mode table, past claims included.
func checkS1(t fataler, v *structs.Volume) {
	total := len(v.ReadClaims) + len(v.WriteClaims) + len(v.PastClaims)
	writers := len(v.WriteClaims)
	for _, c := range v.PastClaims {
		if c.Mode == structs.ClaimModeWrite {
			writers++
		}
	}
	var bad bool
	switch v.AccessMode {
	case structs.AccessModeSingleNodeReader:
		bad = total > 1 || writers > 0
	case structs.AccessModeSingleNodeWriter:
		bad = total > 1
	case structs.AccessModeMultiNodeReader:
		bad = writers > 0
	case structs.AccessModeMultiNodeSingleWriter:
		bad = writers > 1
	case structs.AccessModeSingleNodeSingleWriter:
		bad = total > 1
	case structs.AccessModeSingleNodeMultiWriter:
		nodes := map[string]bool{}
		for _, c := range v.AllClaims() {
			nodes[c.NodeID] = true
		}
		bad = len(nodes) > 1
	}
	if bad {
		t.Fatalf("S1 volume %s (%s): exp: within limits got: %d claims, %d writers: %v", v.ID, v.AccessMode, total, writers, v.AllClaims())
	}
}

func checkClaimMaps(t fataler, v *structs.Volume) {
	for mode, m := range map[structs.ClaimMode]map[string]*structs.Claim{structs.ClaimModeRead: v.ReadClaims, structs.ClaimModeWrite: v.WriteClaims} {
		for id, c := range m {
			if c.State != structs.ClaimStateTaken || c.Mode != mode || c.AllocID != id || c.VolumeID != v.ID {
				t.Fatalf("live %s claim %s: exp: taken, keyed by alloc got: %v", mode, id, c)
			}
		}
	}
	for id, c := range v.PastClaims {
		if c.State == structs.ClaimStateTaken || !c.State.Valid() || c.State == structs.ClaimStateFreed || c.AllocID != id {
			t.Fatalf("past claim %s: exp: releasing state got: %v", id, c)
		}
	}
	if v.HasClaims() != (v.CurrentAccessMode != "") || (v.HasClaims() && v.CurrentAccessMode != v.AccessMode) {
		t.Fatalf("volume %s current modes: exp: set iff claimed got: %q with %d claims", v.ID, v.CurrentAccessMode, len(v.AllClaims()))
	}
}

func (r *propRun) compareWithModel(t *rapid.T, vols []*structs.Volume, allocs []*structs.Alloc, evals []*structs.Eval, nodes []*structs.Node) {
	m := r.m
	if len(vols) != len(m.vols) {
		t.Fatalf("volumes: exp: %d got: %d", len(m.vols), len(vols))
	}
	for _, v := range vols {
		if mode, ok := m.vols[v.ID]; !ok || mode != v.AccessMode {
			t.Fatalf("volume %s: exp: %q got: %q", v.ID, mode, v.AccessMode)
		}
		cs := v.AllClaims()
		if len(cs) != len(m.claims[v.ID]) {
			t.Fatalf("volume %s claims: exp: %d got: %v", v.ID, len(m.claims[v.ID]), cs)
		}
		for _, c := range cs {
			mc := m.claims[v.ID][c.AllocID]
			if mc == nil || mc.mode != c.Mode || mc.state != c.State || mc.node != c.NodeID {
				t.Fatalf("claim %v: exp: %+v", c, mc)
			}
		}
	}
	if len(allocs) != len(m.allocs) {
		t.Fatalf("allocs: exp: %d got: %d", len(m.allocs), len(allocs))
	}
	for _, a := range allocs {
		ma := m.allocs[a.ID]
		if ma == nil || ma.status != a.ClientStatus || ma.stopping != (a.DesiredStatus == structs.AllocDesiredStop) || ma.node != a.NodeID {
			t.Fatalf("alloc %+v: exp: %+v", a, ma)
		}
	}
	if len(evals) != len(m.evals) {
		t.Fatalf("evals: exp: %d got: %d", len(m.evals), len(evals))
	}
	for _, e := range evals {
		me := m.evals[e.ID]
		if me == nil || me.vol != e.VolumeID || me.status != e.Status {
			t.Fatalf("eval %+v: exp: %+v", e, me)
		}
	}
	if len(nodes) != len(m.nodes) {
		t.Fatalf("nodes: exp: %d got: %d", len(m.nodes), len(nodes))
	}
	for _, n := range nodes {
		if mn := m.nodes[n.ID]; mn == nil || mn.ready != (n.Status == structs.NodeStatusReady) {
			t.Fatalf("node %s: exp: %+v got: %s", n.ID, mn, n.Status)
		}
	}
}

func (r *propRun) checkSnapshots() {
	a, b := mustSnapshotBytes(r.t, r.f), mustSnapshotBytes(r.t, r.twin)
	if !bytes.Equal(a, b) {
		r.t.Fatalf("S2: exp: identical snapshots from the same log got: %d and %d bytes differing", len(a), len(b))
	}
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(a))); err != nil {
		r.t.Fatalf("restore: %v", err)
	}
	if c := mustSnapshotBytes(r.t, restored); !bytes.Equal(a, c) {
		r.t.Fatalf("snapshot → restore → snapshot: exp: identical got: %d vs %d bytes", len(a), len(c))
	}
}
