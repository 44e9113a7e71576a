package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"testing"

	"github.com/claimd/claimd/structs"
)

// evalSnapshotState is a state with evals in every condition: v1 claimed
// and released five times (one pending eval, three finished kept), v2
// released and freed (one complete eval), v3 deregistered by force after a
// release (its evals gone with it, or kept complete by a build before
// decision 41), v4 with an operator's eval beside the release's, and an
// eval upserted for volume v1 that failed.
func evalSnapshotState(t testing.TB) *harness {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	for _, id := range []string{"v1", "v2", "v3", "v4"} {
		h.registerVolumes(testVolume(id, structs.AccessModeSingleNodeWriter))
	}
	cycle := func(vol, alloc string, free bool) {
		h.placeAllocs(testAlloc(alloc, "n1", vol))
		h.mustClaim(vol, alloc, "n1", structs.ClaimModeWrite)
		h.release(vol, alloc)
		if free {
			h.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
				VolumeID: vol, AllocID: alloc, State: structs.ClaimStateFreed, NodeDetached: true})
		}
	}
	for i := range 5 {
		cycle("v1", fmt.Sprintf("a1-%d", i), i < 4)
	}
	cycle("v2", "a2", true)
	cycle("v3", "a3", false)
	h.clientUpdate("a3", structs.AllocClientComplete)
	h.mustApply(structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{"v3"}, Force: true})
	cycle("v4", "a4", false)
	h.mustApply(structs.EvalUpsertRequestType, &structs.EvalUpsertRequest{Evals: []*structs.Eval{
		{ID: "op-1", Type: structs.EvalTypeVolumeClaimGC, VolumeID: "v4", TriggeredBy: structs.EvalTriggerOperator},
		{ID: "op-2", Type: structs.EvalTypeVolumeClaimGC, VolumeID: "v1", TriggeredBy: structs.EvalTriggerOperator},
	}})
	h.mustApply(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: "op-2",
		Status: structs.EvalStatusFailed, StatusDescription: "operator gave up"})
	// The last entry writes a volume: since evals live in volume rows, an
	// eval's change is a write to the volumes table too, and the index
	// table would differ from the older build's after an eval entry.
	h.registerVolumes(testVolume("v5", structs.AccessModeSingleNodeWriter))
	return h
}

// TestEvals_SnapshotFromBeforeVolumeRows: a snapshot written when evals
// had a table of their own (testdata, written at 55ad4e4 from
// evalSnapshotState) restores to the evals the live state holds, the
// deregistered volume's finished eval dropped, and the restored state then
// snapshots to the same bytes as the live one and keeps applying the same
// way.
func TestEvals_SnapshotFromBeforeVolumeRows(t *testing.T) {
	old, err := os.ReadFile("testdata/evals-before-volume-rows.snap")
	if err != nil {
		t.Fatal(err)
	}
	h := evalSnapshotState(t)
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatalf("exp: restore got: %v", err)
	}
	want, _ := h.f.State().Evals(nil)
	if len(want) != 8 { // v1: 1 pending, 3 complete, 1 failed; v2: 1; v4: 2; v3's none
		t.Fatalf("exp: 8 evals in the live state got: %d", len(want))
	}
	assertSameEvals(t, h.f, restored)
	for _, e := range want {
		if got, _ := restored.State().EvalByID(nil, e.ID); !reflect.DeepEqual(got, e) {
			t.Fatalf("eval %s by ID: exp: %+v got: %+v", e.ID, e, got)
		}
	}
	if now, then := mustSnapshotBytes(t, h.f), mustSnapshotBytes(t, restored); !bytes.Equal(now, then) {
		t.Fatalf("exp: the restored state snapshots to the live state's bytes got: %d and %d bytes", len(now), len(then))
	}

	// The format written now restores to the same evals.
	again := New(nil)
	if err := again.Restore(io.NopCloser(bytes.NewReader(mustSnapshotBytes(t, h.f)))); err != nil {
		t.Fatalf("exp: restore of today's format got: %v", err)
	}
	assertSameEvals(t, h.f, again)

	// The same entry on the live and restored states: v1's last claim
	// freed completes its pending eval, and the next release makes a new
	// one, pruning the oldest finished eval.
	for _, f := range []*FSM{h.f, restored} {
		r := &harness{t: t, f: f, index: h.index}
		r.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
			VolumeID: "v1", AllocID: "a1-4", State: structs.ClaimStateFreed, NodeDetached: true})
		r.placeAllocs(testAlloc("a1-5", "n1", "v1"))
		r.mustClaim("v1", "a1-5", "n1", structs.ClaimModeWrite)
		r.release("v1", "a1-5")
		evals, _ := f.State().EvalsByVolume(nil, "v1")
		var pending, done int
		for _, e := range evals {
			if e.Status == structs.EvalStatusPending {
				pending++
			} else {
				done++
			}
		}
		if pending != 1 || done != keepTerminalEvals {
			t.Fatalf("exp: v1 with one pending eval and %d finished got: %+v", keepTerminalEvals, evals)
		}
	}
	assertSameEvals(t, h.f, restored)
	if now, then := mustSnapshotBytes(t, h.f), mustSnapshotBytes(t, restored); !bytes.Equal(now, then) {
		t.Fatalf("exp: the same bytes after the same entries got: %d and %d bytes", len(now), len(then))
	}
}

// assertSameEvals compares two states through every eval reader.
func assertSameEvals(t *testing.T, a, b *FSM) {
	t.Helper()
	for _, read := range []struct {
		name string
		get  func(s *StateStore) any
	}{
		{"all", func(s *StateStore) any { e, _ := s.Evals(nil); return e }},
		{"pending", func(s *StateStore) any { e, _ := s.EvalsByStatus(nil, structs.EvalStatusPending); return e }},
		{"failed", func(s *StateStore) any { e, _ := s.EvalsByStatus(nil, structs.EvalStatusFailed); return e }},
		{"v1", func(s *StateStore) any { e, _ := s.EvalsByVolume(nil, "v1"); return e }},
		{"v3", func(s *StateStore) any { e, _ := s.EvalsByVolume(nil, "v3"); return e }},
		{"since 0", func(s *StateStore) any { e, last, _ := s.PendingEvalsSince(nil, 0); return []any{e, last} }},
		{"since 30", func(s *StateStore) any { e, last, _ := s.PendingEvalsSince(nil, 30); return []any{e, last} }},
	} {
		if x, y := read.get(a.State()), read.get(b.State()); !reflect.DeepEqual(x, y) {
			t.Fatalf("evals (%s): exp: the same got:\n%s\n%s", read.name, dumpEvals(x), dumpEvals(y))
		}
	}
}

func dumpEvals(x any) string { b, _ := json.Marshal(x); return string(b) }
