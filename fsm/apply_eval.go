package fsm

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.EvalUpsertRequestType, applyEvalUpsert)
	registerCommand(structs.EvalCompleteRequestType, applyEvalComplete)
}

// applyEvalUpsert stores evals the leader made (operator force, re-scans).
// A pending eval with nothing to do (its volume has no past claims) is
// stored complete at once, so the watcher never picks it up; one for a
// volume that is not registered is not stored at all. A finished eval is
// never reopened: make a new one.
func applyEvalUpsert(tx *txn, req *structs.EvalUpsertRequest) (any, error) {
	if len(req.Evals) == 0 {
		return nil, structs.Invalid("evals", "must not be empty")
	}
	seen := make(map[string]bool, len(req.Evals))
	// Evals have no index by ID (decision 41): one pass over the volumes
	// finds those the entry names. Upserts are the leader's rare re-scans.
	existing := map[string]*structs.Eval{}
	for _, in := range req.Evals {
		if in != nil {
			existing[in.ID] = nil
		}
	}
	for _, raw := range tx.all(TableVolumes, indexID) {
		for _, e := range raw.(*structs.Volume).Evals {
			if _, ok := existing[e.ID]; ok {
				existing[e.ID] = e
			}
		}
	}
	for i, in := range req.Evals {
		if err := in.Validate(); err != nil {
			return nil, itemError("evals", i, err)
		}
		if seen[in.ID] {
			return nil, structs.Invalid(fmt.Sprintf("evals[%d].id", i), fmt.Sprintf("%q is given twice", in.ID))
		}
		seen[in.ID] = true
		e := in.Copy()
		if e.Status == "" {
			e.Status = structs.EvalStatusPending
		}
		e.CreateIndex, e.ModifyIndex = tx.index, tx.index
		if old := existing[e.ID]; old != nil {
			if old.Status.Terminal() {
				if old.Status == e.Status && old.VolumeID == e.VolumeID {
					continue // a retried upsert
				}
				return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf("eval %q is %s and cannot change", old.ID, old.Status))
			}
			if old.VolumeID != e.VolumeID {
				return nil, structs.Invalid(fmt.Sprintf("evals[%d].volume_id", i), fmt.Sprintf("eval %q is for volume %q", old.ID, old.VolumeID))
			}
			e.CreateIndex = old.CreateIndex
		}
		v := getVolume(tx, e.VolumeID)
		if v == nil {
			// An eval lives in its volume's row (decision 41): one for a
			// volume that is gone would have nothing to do, and is not kept.
			continue
		}
		switch {
		case e.Status == structs.EvalStatusComplete:
			if err := checkCompletable(v, e.ID); err != nil {
				return nil, err
			}
		case e.Status == structs.EvalStatusPending && len(v.PastClaims) == 0:
			e.Status, e.StatusDescription = structs.EvalStatusComplete, "volume has no past claims"
		}
		v = v.Copy()
		setEval(tx, v, e)
		tx.put(TableVolumes, v)
	}
	return nil, nil
}

// applyEvalComplete finishes an eval: complete once its volume has no past
// claims left, or failed (a permanent error) at any time.
func applyEvalComplete(tx *txn, req *structs.EvalCompleteRequest) (any, error) {
	if err := structs.ValidateID("eval_id", req.EvalID); err != nil {
		return nil, err
	}
	if !req.Status.Terminal() {
		return nil, structs.Invalid("status", fmt.Sprintf("%q is not %q or %q",
			req.Status, structs.EvalStatusComplete, structs.EvalStatusFailed))
	}
	if len(req.StatusDescription) > 4096 {
		return nil, structs.Invalid("status_description", "longer than 4096 bytes")
	}
	old, v := getEval(tx, req.EvalID, req.VolumeID)
	if old == nil {
		return nil, structs.NotFound("eval", req.EvalID)
	}
	if old.Status.Terminal() {
		if old.Status == req.Status {
			return nil, nil // a retried completion
		}
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf("eval %q is already %s", old.ID, old.Status))
	}
	if req.Status == structs.EvalStatusComplete {
		if err := checkCompletable(v, old.ID); err != nil {
			return nil, err
		}
	}
	e := old.Copy()
	e.Status, e.StatusDescription = req.Status, req.StatusDescription
	e.ModifyIndex = tx.index
	v = v.Copy()
	setEval(tx, v, e)
	tx.put(TableVolumes, v)
	return nil, nil
}

// checkCompletable refuses completing an eval whose volume still has past
// claims: the release is not done, and completing would leave them with
// nobody to drive them (L1). A claim released while the eval ran is the
// usual reason; the watcher goes round again.
func checkCompletable(v *structs.Volume, evalID string) error {
	if v == nil || len(v.PastClaims) == 0 {
		return nil
	}
	return structs.NewError(structs.CodeConflict, fmt.Sprintf(
		"eval %q: volume %q still has %d past claims", evalID, v.ID, len(v.PastClaims)))
}
