package fsm

import (
	"cmp"
	"slices"

	"github.com/claimd/claimd/structs"
)

// keepTerminalEvals is how many finished evals a volume keeps for
// operators to read (`claimd eval list`). Older ones are deleted when the
// volume gets a new eval, so a volume claimed and released all day holds a
// few evals, not one per release.
const keepTerminalEvals = 3

// A volume's evals live in its row (structs.Volume.Evals, decision 41):
// the helpers below change the evals of v, a copy of the volume the
// caller is about to put. Stored evals are never changed in place: a
// changed eval is a new copy, and v.Evals a new slice, because v shares
// its slice with the stored row until then.

// pendingEval returns v's pending eval, or nil. A volume has at most one.
func pendingEval(v *structs.Volume) *structs.Eval {
	for _, e := range v.Evals {
		if e.Status == structs.EvalStatusPending {
			return e
		}
	}
	return nil
}

// compareEvals is the order of a volume's evals: oldest first, by
// CreateIndex then ID, the same on every server whatever order the evals
// arrived in (a restore from an older snapshot reads them by ID).
func compareEvals(a, b *structs.Eval) int {
	return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), cmp.Compare(a.ID, b.ID))
}

// setEval stores e in v: it replaces v's eval with the same ID, or adds e.
func setEval(tx *txn, v *structs.Volume, e *structs.Eval) {
	evals := slices.Clone(v.Evals)
	if i := slices.IndexFunc(evals, func(x *structs.Eval) bool { return x.ID == e.ID }); i >= 0 {
		evals[i] = e
	} else {
		evals = append(evals, e)
		slices.SortFunc(evals, compareEvals)
	}
	v.Evals = evals
	tx.touched[TableEvals] = true
}

// dropEvals deletes the given evals of v.
func dropEvals(tx *txn, v *structs.Volume, drop []*structs.Eval) {
	if len(drop) == 0 {
		return
	}
	v.Evals = slices.DeleteFunc(slices.Clone(v.Evals), func(e *structs.Eval) bool {
		return slices.Contains(drop, e)
	})
	if len(v.Evals) == 0 {
		v.Evals = nil
	}
	tx.touched[TableEvals] = true
}

// ensurePendingEval makes sure v, a volume with past claims, has a pending
// volume-claim-gc eval, creating one when it has none. One pending eval
// per volume is enough: the watcher works on all of the volume's past
// claims, and EvalComplete is refused while any is left, so a claim
// released while the eval runs is never missed. The ID is derived from the
// Raft index so every server creates the same eval.
func ensurePendingEval(tx *txn, v *structs.Volume, trigger string) {
	if pendingEval(v) != nil {
		return
	}
	pruneTerminalEvals(tx, v)
	setEval(tx, v, &structs.Eval{
		ID:          structs.DeriveEvalID(tx.index, v.ID),
		Type:        structs.EvalTypeVolumeClaimGC,
		VolumeID:    v.ID,
		Status:      structs.EvalStatusPending,
		TriggeredBy: trigger,
		CreateIndex: tx.index,
		ModifyIndex: tx.index,
	})
}

// completeVolumeEvals completes v's pending evals: its past claims are all
// freed, and nothing is left for them to do. (An operator's re-scan can
// add a second pending eval beside the release's.)
func completeVolumeEvals(tx *txn, v *structs.Volume, why string) {
	for _, e := range v.Evals {
		if e.Status != structs.EvalStatusPending {
			continue
		}
		c := e.Copy()
		c.Status = structs.EvalStatusComplete
		c.StatusDescription = why
		c.ModifyIndex = tx.index
		setEval(tx, v, c)
	}
}

// pruneTerminalEvals deletes all but the newest keepTerminalEvals of v's
// finished evals.
func pruneTerminalEvals(tx *txn, v *structs.Volume) {
	var done []*structs.Eval
	for _, e := range v.Evals { // oldest first
		if e.Status.Terminal() {
			done = append(done, e)
		}
	}
	if n := len(done) - keepTerminalEvals; n > 0 {
		dropEvals(tx, v, done[:n])
	}
}
