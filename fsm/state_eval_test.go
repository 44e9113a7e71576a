package fsm

import (
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

func pendingVolumes(t *testing.T, evals []*structs.Eval) []string {
	t.Helper()
	var out []string
	for _, e := range evals {
		if e.Status != structs.EvalStatusPending {
			t.Fatalf("exp: only pending evals got: %+v", e)
		}
		out = append(out, e.VolumeID)
	}
	return out
}

func TestPendingEvalsSince_ReturnsOnlyEvalsWrittenAfterTheLastLook(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter),
		testVolume("v2", structs.AccessModeSingleNodeWriter), testVolume("v3", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"), testAlloc("a2", "n1", "v2"), testAlloc("a3", "n1", "v3"))
	for _, c := range [][2]string{{"v1", "a1"}, {"v2", "a2"}, {"v3", "a3"}} {
		h.mustClaim(c[0], c[1], "n1", structs.ClaimModeWrite)
	}
	state := h.f.State()
	if evals, since, err := state.PendingEvalsSince(nil, 0); err != nil || len(evals) != 0 || since != 0 {
		t.Fatalf("exp: nothing pending got: %v %d %v", evals, since, err)
	}

	h.release("v1", "a1")
	ws := memdb.NewWatchSet()
	evals, since, err := state.PendingEvalsSince(ws, 0)
	if err != nil || len(evals) != 1 || evals[0].VolumeID != "v1" || since != evals[0].ModifyIndex {
		t.Fatalf("exp: v1's eval and its index got: %+v %d %v", evals, since, err)
	}

	h.release("v2", "a2")
	if timedOut := ws.Watch(time.After(5 * time.Second)); timedOut {
		t.Fatalf("exp: a new pending eval wakes the watch")
	}
	ws = memdb.NewWatchSet()
	evals, since2, _ := state.PendingEvalsSince(ws, since)
	if got := pendingVolumes(t, evals); len(got) != 1 || got[0] != "v2" {
		t.Fatalf("exp: only v2's eval (v1's was seen) got: %v", got)
	}

	// An eval leaving the pending set wakes the watch but adds nothing.
	h.mustApply(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: evals[0].ID, Status: structs.EvalStatusFailed, StatusDescription: "test"})
	if timedOut := ws.Watch(time.After(5 * time.Second)); timedOut {
		t.Fatalf("exp: a completed eval wakes the watch")
	}
	if evals, since3, _ := state.PendingEvalsSince(nil, since2); len(evals) != 0 || since3 != since2 {
		t.Fatalf("exp: nothing new got: %+v, since %d → %d", evals, since2, since3)
	}

	// From zero, every pending eval, oldest write first.
	h.release("v3", "a3")
	evals, _, _ = state.PendingEvalsSince(nil, 0)
	if got := pendingVolumes(t, evals); len(got) != 2 || got[0] != "v1" || got[1] != "v3" {
		t.Fatalf("exp: [v1 v3] got: %v", got)
	}
}
