package fsm

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
)

// applyLogAt applies an entry as Raft does, with the leader's append time.
func (h *harness) applyLogAt(at time.Time, mt structs.MessageType, req any) any {
	h.t.Helper()
	data, err := structs.Encode(mt, req)
	if err != nil {
		h.t.Fatalf("encode: %v", err)
	}
	h.index++
	resp := h.f.Apply(&raft.Log{Index: h.index, Data: data, AppendedAt: at})
	if err, ok := resp.(error); ok {
		h.t.Fatalf("apply type %d: exp: success got: %v", mt, err)
	}
	return resp
}

// A claim records each state it reaches with the entry's Raft index and
// the leader's append time, and the freed claim's timeline stays on the
// volume (bounded), through a snapshot too.
func TestClaimSteps_TimelineWithIndexAndTimeOutlivesTheClaim(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	takenAt := h.index
	base := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	h.applyLogAt(base, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{
		{VolumeID: "v1", AllocID: "a1", Release: true}}})
	want := []structs.ClaimStep{
		{State: structs.ClaimStateTaken, Index: takenAt},
		{State: structs.ClaimStateUnpublishing, Index: h.index, Time: base},
	}
	for i, st := range []structs.ClaimState{structs.ClaimStateNodeDetached, structs.ClaimStateControllerDetached, structs.ClaimStateFreed} {
		at := base.Add(time.Duration(i+1) * time.Minute)
		h.applyLogAt(at, structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: st})
		want = append(want, structs.ClaimStep{State: st, Index: h.index, Time: at})
		if st != structs.ClaimStateFreed {
			if got := h.volume("v1").PastClaims["a1"].Steps; !stepsEqual(got, want) {
				t.Fatalf("after %s: exp: %+v got: %+v", st, want, got)
			}
		}
	}
	v := h.volume("v1")
	if v.HasClaims() || len(v.Released) != 1 || !stepsEqual(v.Released[0].Steps, want) || v.Released[0].State != structs.ClaimStateFreed {
		t.Fatalf("exp: one released claim with steps %+v got: %+v", want, v.Released)
	}

	f2 := New(nil)
	if err := f2.Restore(io.NopCloser(bytes.NewReader(mustSnapshotBytes(t, h.f)))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got, _ := f2.State().VolumeByID(nil, "v1"); len(got.Released) != 1 || !stepsEqual(got.Released[0].Steps, want) {
		t.Fatalf("after snapshot: exp: steps %+v got: %+v", want, got.Released)
	}
}

// The watcher's one-entry checkpoints record the states they pass
// through: controller detach and free together, node detach and free
// together for a plugin without a controller.
func TestClaimSteps_PassedThroughStatesAreRecorded(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.release("v1", "a1")
	h.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached})
	h.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed})
	if got := stepStates(h.volume("v1").Released[0]); got != "taken,unpublishing,node-detached,controller-detached,freed" {
		t.Fatalf("controller detach and free in one entry: exp: every step got: %s", got)
	}

	h.placeAllocs(testAlloc("a2", "n1", "v1"))
	h.mustClaim("v1", "a2", "n1", structs.ClaimModeWrite)
	h.release("v1", "a2")
	h.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a2", State: structs.ClaimStateFreed, NodeDetached: true})
	if got := stepStates(h.volume("v1").Released[1]); got != "taken,unpublishing,node-detached,freed" {
		t.Fatalf("node detach and free in one entry: exp: no controller step got: %s", got)
	}

	h.placeAllocs(testAlloc("a3", "n1", "v1"))
	h.mustClaim("v1", "a3", "n1", structs.ClaimModeWrite)
	h.release("v1", "a3")
	h.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a3", State: structs.ClaimStateFreed, ForcedSkip: true})
	if c := h.volume("v1").Released[2]; stepStates(c) != "taken,unpublishing,freed" || !c.NodeDetachSkipped {
		t.Fatalf("forced free: exp: no step that was not done, node detach skipped got: %s %+v", stepStates(c), c)
	}
}

func stepStates(c *structs.Claim) string {
	var out []string
	for _, s := range c.Steps {
		out = append(out, string(s.State))
	}
	return strings.Join(out, ",")
}

func TestClaimSteps_ReleasedHistoryIsBounded(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	for i := 0; i < structs.MaxReleasedClaims+2; i++ {
		alloc := "a1"
		if i > 0 {
			alloc = "b" + string(rune('0'+i))
			h.placeAllocs(testAlloc(alloc, "n1", "v1"))
			h.mustClaim("v1", alloc, "n1", structs.ClaimModeWrite)
		}
		h.release("v1", alloc)
		h.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
			VolumeID: "v1", AllocID: alloc, State: structs.ClaimStateFreed, ForcedSkip: true})
	}
	v := h.volume("v1")
	if len(v.Released) != structs.MaxReleasedClaims || v.Released[len(v.Released)-1].AllocID != "b6" {
		t.Fatalf("exp: the newest %d released claims, newest last got: %d, last %+v", structs.MaxReleasedClaims, len(v.Released), v.Released[len(v.Released)-1])
	}
}

func stepsEqual(a, b []structs.ClaimStep) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].State != b[i].State || a[i].Index != b[i].Index || !a[i].Time.Equal(b[i].Time) {
			return false
		}
	}
	return true
}

// A volume written before claims had steps (an older server's snapshot or
// log entry: the same msgpack without the new fields) decodes with empty
// timelines and everything else intact.
func TestClaimSteps_OlderEncodingDecodes(t *testing.T) {
	// The msgpack names are the json tags, as in structs.
	type oldClaim struct {
		VolumeID    string             `json:"volume_id"`
		AllocID     string             `json:"alloc_id"`
		NodeID      string             `json:"node_id"`
		Mode        structs.ClaimMode  `json:"mode"`
		State       structs.ClaimState `json:"state"`
		CreateIndex uint64             `json:"create_index,omitempty"`
		ModifyIndex uint64             `json:"modify_index,omitempty"`
	}
	type oldVolume struct {
		ID          string               `json:"id"`
		ExternalID  string               `json:"external_id"`
		PluginID    string               `json:"plugin_id"`
		AccessMode  structs.AccessMode   `json:"access_mode"`
		PastClaims  map[string]*oldClaim `json:"past_claims,omitempty"`
		CreateIndex uint64               `json:"create_index,omitempty"`
		ModifyIndex uint64               `json:"modify_index,omitempty"`
	}
	data, err := structs.EncodeMsgpack(&oldVolume{ID: "v1", ExternalID: "ext-v1", PluginID: "hostdir",
		AccessMode: structs.AccessModeSingleNodeWriter, CreateIndex: 3, ModifyIndex: 9,
		PastClaims: map[string]*oldClaim{"a1": {VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite,
			State: structs.ClaimStateUnpublishing, CreateIndex: 4, ModifyIndex: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	var v structs.Volume
	if err := structs.Decode(data, &v); err != nil {
		t.Fatalf("decode an older volume: %v", err)
	}
	c := v.PastClaims["a1"]
	if v.ID != "v1" || v.ModifyIndex != 9 || v.Released != nil || c == nil || c.State != structs.ClaimStateUnpublishing || c.Steps != nil || c.ModifyIndex != 9 {
		t.Fatalf("older volume exp: fields intact, no steps, no released claims got: %+v claim %+v", v, c)
	}
}
