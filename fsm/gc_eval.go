package fsm

import "github.com/claimd/claimd/structs"

// ensurePendingEval makes sure a volume with past claims has a pending
// volume-claim-gc eval, creating one when it has none. One pending eval per
// volume is enough: the watcher works on all of the volume's past claims,
// and EvalComplete is refused while any is left, so a claim released while
// the eval runs is never missed. The ID is derived from the Raft index so
// every server creates the same eval.
func ensurePendingEval(tx *txn, volumeID, trigger string) {
	for _, e := range evalsOfVolume(tx, volumeID) {
		if e.Status == structs.EvalStatusPending {
			return
		}
	}
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
