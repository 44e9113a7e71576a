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

// ensurePendingEval makes sure a volume with past claims has a pending
// volume-claim-gc eval, creating one when it has none. One pending eval per
// volume is enough: the watcher works on all of the volume's past claims,
// and EvalComplete is refused while any is left, so a claim released while
// the eval runs is never missed. The ID is derived from the Raft index so
// every server creates the same eval.
func ensurePendingEval(tx *txn, volumeID, trigger string) {
	evals := evalsOfVolume(tx, volumeID)
	for _, e := range evals {
		if e.Status == structs.EvalStatusPending {
			return
		}
	}
	pruneTerminalEvals(tx, evals)
	tx.put(TableEvals, &structs.Eval{
		ID:          structs.DeriveEvalID(tx.index, volumeID),
		Type:        structs.EvalTypeVolumeClaimGC,
		VolumeID:    volumeID,
		Status:      structs.EvalStatusPending,
		TriggeredBy: trigger,
		CreateIndex: tx.index,
		ModifyIndex: tx.index,
	})
}

// completeVolumeEvals completes a volume's pending evals: used when the
// volume is gone and nothing is left for them to do.
func completeVolumeEvals(tx *txn, volumeID, why string) {
	for _, e := range evalsOfVolume(tx, volumeID) {
		if e.Status != structs.EvalStatusPending {
			continue
		}
		c := e.Copy()
		c.Status = structs.EvalStatusComplete
		c.StatusDescription = why
		c.ModifyIndex = tx.index
		tx.put(TableEvals, c)
	}
}

// pruneTerminalEvals deletes all but the newest keepTerminalEvals of a
// volume's finished evals (newest by CreateIndex, then ID: the same on
// every server).
func pruneTerminalEvals(tx *txn, evals []*structs.Eval) {
	var done []*structs.Eval
	for _, e := range evals {
		if e.Status.Terminal() {
			done = append(done, e)
		}
	}
	if len(done) <= keepTerminalEvals {
		return
	}
	slices.SortFunc(done, func(a, b *structs.Eval) int {
		return cmp.Or(cmp.Compare(b.CreateIndex, a.CreateIndex), cmp.Compare(b.ID, a.ID))
	})
	for _, e := range done[keepTerminalEvals:] {
		tx.remove(TableEvals, e)
	}
}
