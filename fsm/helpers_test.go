package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/claimd/claimd/structs"
)

// harness drives an FSM through encoded log entries, as Raft would, and
// keeps the log so tests can replay it elsewhere.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
	log   [][]byte
}

func mustNewHarness(t testing.TB) *harness {
	t.Helper()
	return &harness{t: t, f: New(nil)}
}

// apply encodes and applies one entry at the next index.
func (h *harness) apply(mt structs.MessageType, req any) any {
	h.t.Helper()
	data, err := structs.Encode(mt, req)
	if err != nil {
		h.t.Fatalf("encode: %v", err)
	}
	h.index++
	h.log = append(h.log, data)
	return h.f.apply(h.index, data)
}

// mustApply applies an entry that must not be refused.
func (h *harness) mustApply(mt structs.MessageType, req any) any {
	h.t.Helper()
	resp := h.apply(mt, req)
	if err, ok := resp.(error); ok {
		h.t.Fatalf("apply type %d: exp: success got: %v", mt, err)
	}
	return resp
}

// mustRefuse applies an entry that must be refused with the given code and
// must change nothing.
func (h *harness) mustRefuse(mt structs.MessageType, req any, code structs.ErrorCode) error {
	h.t.Helper()
	before := mustSnapshotBytes(h.t, h.f)
	resp := h.apply(mt, req)
	err, ok := resp.(error)
	if !ok {
		h.t.Fatalf("apply type %d: exp: %s error got: %#v", mt, code, resp)
	}
	if !errors.Is(err, &structs.CodedError{Code: code}) {
		h.t.Fatalf("apply type %d: exp: %s error got: %v", mt, code, err)
	}
	if after := mustSnapshotBytes(h.t, h.f); !bytes.Equal(before, after) {
		h.t.Fatalf("refused entry changed the state: %v", err)
	}
	return err
}

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustSnapshotBytes(t fataler, f *FSM) []byte {
	t.Helper()
	var buf bytes.Buffer
	snap := newSnapshot(f.State())
	defer snap.Release()
	if err := snap.write(&buf); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return buf.Bytes()
}

func (h *harness) volume(id string) *structs.Volume {
	h.t.Helper()
	v, err := h.f.State().VolumeByID(nil, id)
	if err != nil {
		h.t.Fatalf("VolumeByID(%q): %v", id, err)
	}
	return v
}

func (h *harness) alloc(id string) *structs.Alloc {
	h.t.Helper()
	a, err := h.f.State().AllocByID(nil, id)
	if err != nil {
		h.t.Fatalf("AllocByID(%q): %v", id, err)
	}
	return a
}

func testVolume(id string, mode structs.AccessMode) *structs.Volume {
	return &structs.Volume{
		ID: id, Name: "vol " + id, ExternalID: "ext-" + id, PluginID: "hostdir",
		AccessMode: mode, AttachmentMode: structs.AttachmentModeFilesystem,
		Parameters: map[string]string{"tier": "fast"},
		Secrets:    structs.Secrets{"token": "s3cret"},
	}
}

func testNode(id string) *structs.Node {
	return &structs.Node{
		ID: id, Name: "node " + id, SecretID: "secret-" + id, Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{
			"hostdir": {PluginID: "hostdir", Healthy: true, ExternalNodeID: "ext-" + id},
		},
	}
}

func testAlloc(id, node string, vols ...string) *structs.Alloc {
	a := &structs.Alloc{ID: id, NodeID: node}
	for _, v := range vols {
		a.Volumes = append(a.Volumes, &structs.AllocVolumeRequest{VolumeID: v})
	}
	return a
}

func (h *harness) registerVolumes(vols ...*structs.Volume) {
	h.t.Helper()
	h.mustApply(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: vols})
}

// registerNode registers n as a cluster with ACLs off would: its
// controllers admitted as they register (registerPendingNode: not).
func (h *harness) registerNode(n *structs.Node) {
	h.t.Helper()
	h.mustApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n, AutoAdmit: structs.AdmittedByACLDisabled})
}

// registerPendingNode registers n as a client certificate would with ACLs
// on: its controllers wait for an admission.
func (h *harness) registerPendingNode(n *structs.Node) {
	h.t.Helper()
	h.mustApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n})
}

func (h *harness) placeAllocs(allocs ...*structs.Alloc) {
	h.t.Helper()
	h.mustApply(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: allocs})
}

// claims applies a claim batch and returns its results.
func (h *harness) claims(reqs ...*structs.VolumeClaimRequest) []*structs.ClaimResult {
	h.t.Helper()
	resp := h.mustApply(structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: reqs})
	br, ok := resp.(*structs.ClaimBatchResponse)
	if !ok {
		h.t.Fatalf("claim batch: exp: *ClaimBatchResponse got: %#v", resp)
	}
	if len(br.Results) != len(reqs) {
		h.t.Fatalf("claim batch: exp: %d results got: %d", len(reqs), len(br.Results))
	}
	return br.Results
}

// mustClaim claims and fails the test on refusal.
func (h *harness) mustClaim(vol, alloc, node string, mode structs.ClaimMode) *structs.ClaimResult {
	h.t.Helper()
	r := h.claims(&structs.VolumeClaimRequest{VolumeID: vol, AllocID: alloc, NodeID: node, Mode: mode})[0]
	if r.Error != nil {
		h.t.Fatalf("claim %s by %s (%s): exp: success got: %v", vol, alloc, mode, r.Error)
	}
	return r
}

func (h *harness) release(vol, alloc string) *structs.ClaimResult {
	h.t.Helper()
	return h.claims(&structs.VolumeClaimRequest{VolumeID: vol, AllocID: alloc, Release: true})[0]
}

func (h *harness) checkpoint(req *structs.ClaimCheckpointRequest) any {
	h.t.Helper()
	return h.apply(structs.ClaimCheckpointRequestType, req)
}

func (h *harness) clientUpdate(alloc string, status structs.AllocClientStatus) {
	h.t.Helper()
	h.mustApply(structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{
		Allocs: []*structs.AllocClientUpdate{{ID: alloc, ClientStatus: status}},
	})
}
