package fsm

import (
	"fmt"
	"maps"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.ClaimCheckpointRequestType, applyClaimCheckpoint)
	registerCommand(structs.CheckpointBatchRequestType, applyCheckpointBatch)
}

// applyCheckpointBatch applies checkpoints in order, each on its own: like
// the claim batch, the batch only shares a Raft round between the release
// workers, so one refused item (a stale compare-and-set) must not fail the
// others. The entry as a whole is refused only when it carries no items.
func applyCheckpointBatch(tx *txn, req *structs.CheckpointBatchRequest) (any, error) {
	if len(req.Checkpoints) == 0 {
		return nil, structs.Invalid("checkpoints", "must not be empty")
	}
	resp := &structs.CheckpointBatchResponse{Results: make([]*structs.CheckpointResult, len(req.Checkpoints))}
	for i, cp := range req.Checkpoints {
		c, err := checkpointClaim(tx, cp)
		if err != nil {
			resp.Results[i] = &structs.CheckpointResult{Error: asCoded(err)}
			continue
		}
		resp.Results[i] = &structs.CheckpointResult{Claim: c}
	}
	return resp, nil
}

// applyClaimCheckpoint moves a claim along taken → unpublishing →
// node-detached → controller-detached → freed. Each step is its own entry
// so a new leader resumes a release exactly where the old one stopped
// (docs/architecture.md, the release state machine); the rules below are
// what make that safe:
//
//   - only forward (S7): an earlier state is refused, the same state is a
//     no-op so a retried checkpoint is harmless;
//   - ExpectedState turns it into compare-and-set;
//   - passing over node-detached without having been there needs
//     ForcedSkip and is recorded on the claim (S3's one exception);
//   - a live claim moves only to unpublishing (a release) unless forced,
//     and becomes a past claim with a pending eval, exactly as by a
//     release;
//   - freed deletes the claim and, when it was the last, resets the
//     volume's current modes; when no past claim is left, the volume's
//     pending evals complete in the same entry (their work is done).
//
// A checkpoint may cover several steps when nothing happens between them:
// NodeDetached says the caller has just done the node detach, so
// unpublishing → freed (no controller to detach) is one entry, not two.
func applyClaimCheckpoint(tx *txn, req *structs.ClaimCheckpointRequest) (any, error) {
	c, err := checkpointClaim(tx, req)
	if err != nil {
		return nil, err
	}
	return &structs.ClaimCheckpointResponse{Claim: c}, nil
}

// checkpointClaim applies one checkpoint and returns the claim after it (a
// copy; nil once freed). Every check comes before the first write, so a
// refused checkpoint leaves nothing behind.
func checkpointClaim(tx *txn, req *structs.ClaimCheckpointRequest) (*structs.Claim, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	old := getVolume(tx, req.VolumeID)
	if old == nil {
		return nil, structs.NotFound("volume", req.VolumeID)
	}
	c := old.Claim(req.AllocID)
	if c == nil {
		return nil, structs.NotFound("claim", req.VolumeID+"/"+req.AllocID)
	}
	name := fmt.Sprintf("claim %s/%s", req.VolumeID, req.AllocID)
	if req.ExpectedState != "" && c.State != req.ExpectedState {
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf("%s is %s, expected %s", name, c.State, req.ExpectedState))
	}
	cur, next := c.State.Rank(), req.State.Rank()
	switch {
	case next < cur:
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"%s is %s: a checkpoint to %s would move it backwards", name, c.State, req.State))
	case next == cur && req.OperatorReleased && c.State != structs.ClaimStateTaken:
		if c.OperatorReleased {
			return c.Copy(), nil
		}
		v := cowVolume(old, tx.index)
		nc := c.Copy()
		nc.OperatorReleased = true
		nc.ModifyIndex = tx.index
		v.PastClaims[nc.AllocID] = nc
		tx.put(TableVolumes, v)
		return nc.Copy(), nil
	case next == cur:
		if req.State != structs.ClaimStateTaken ||
			(len(req.PublishContext) == 0 || maps.Equal(c.PublishContext, req.PublishContext)) &&
				(!req.ControllerPublished || c.ControllerPublished) {
			return c.Copy(), nil
		}
		v := cowVolume(old, tx.index)
		nc := c.Copy()
		if len(req.PublishContext) > 0 {
			nc.PublishContext = maps.Clone(req.PublishContext)
		}
		nc.ControllerPublished = nc.ControllerPublished || req.ControllerPublished
		nc.ModifyIndex = tx.index
		if nc.Mode == structs.ClaimModeWrite {
			v.WriteClaims[nc.AllocID] = nc
		} else {
			v.ReadClaims[nc.AllocID] = nc
		}
		tx.put(TableVolumes, v)
		return nc.Copy(), nil
	}

	detached := structs.ClaimStateNodeDetached.Rank()
	if req.Fenced {
		if err := checkFenced(tx, old, c, req, name); err != nil {
			return nil, err
		}
	}
	if err := checkClaimsIdentity(tx, c, req, name); err != nil {
		return nil, err
	}
	skipsNodeDetach := cur < detached && next > detached && !req.NodeDetached
	// An operator forcing a claim to node-detached (the node is gone for
	// good) did not unmount anything either: record it like a skip.
	forcedIntoNodeDetached := cur < detached && next == detached && req.ForcedSkip
	if skipsNodeDetach && !req.ForcedSkip && !req.Fenced {
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"%s is %s: it must be node-detached before %s, or forced", name, c.State, req.State))
	}
	// A live claim belongs to an alloc that may be running: releasing it
	// (unpublishing) is the only step anyone but an operator may take.
	if c.State == structs.ClaimStateTaken && req.State != structs.ClaimStateUnpublishing && !req.ForcedSkip {
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"%s is live: only a release (unpublishing) may move it without force", name))
	}

	v := cowVolume(old, tx.index)
	live := v.LiveClaim(req.AllocID) != nil
	delete(v.ReadClaims, req.AllocID)
	delete(v.WriteClaims, req.AllocID)
	delete(v.PastClaims, req.AllocID)
	var out *structs.Claim
	moved := c
	for _, st := range passedThrough(c.State, req) {
		moved = moved.WithStep(st, tx.index, tx.at)
	}
	moved = moved.WithStep(req.State, tx.index, tx.at)
	moved.ForcedSkip = moved.ForcedSkip || req.ForcedSkip
	moved.NodeDetachSkipped = moved.NodeDetachSkipped || skipsNodeDetach || forcedIntoNodeDetached || req.Fenced
	moved.OperatorReleased = moved.OperatorReleased || req.OperatorReleased
	if req.Fenced {
		moved.Fenced, moved.LeaseExpiredAt = true, req.LeaseExpiredAt
	}
	if req.State != structs.ClaimStateFreed {
		out = moved
		v.PastClaims = putClaim(v.PastClaims, out)
	} else {
		keepReleased(v, moved)
	}
	tidyClaims(v)
	switch {
	case live && out != nil:
		ensurePendingEval(tx, v, structs.EvalTriggerClaimRelease)
	case len(v.PastClaims) == 0:
		completeVolumeEvals(tx, v, "all past claims freed")
	}
	tx.put(TableVolumes, v)
	return out.Copy(), nil
}

// passedThrough are the states a checkpoint moves a claim through without
// stopping, that happened in the entry's step: node-detached when the
// caller node-detached the claim on the way (NodeDetached), and
// controller-detached when a node-detached claim is freed (the watcher
// detaches the controller and frees in one checkpoint). A forced skip
// passes through nothing: the steps show what was done, and
// NodeDetachSkipped what was not.
func passedThrough(from structs.ClaimState, req *structs.ClaimCheckpointRequest) []structs.ClaimState {
	var out []structs.ClaimState
	nd, cd := structs.ClaimStateNodeDetached, structs.ClaimStateControllerDetached
	if req.NodeDetached && from.Rank() < nd.Rank() && req.State.Rank() > nd.Rank() {
		out = append(out, nd)
	}
	if from == nd && req.State.Rank() > cd.Rank() && !req.ForcedSkip {
		out = append(out, cd)
	}
	return out
}

// checkFenced admits a fenced checkpoint: the leader found the node's lease
// run out, so the node has stopped the claim's workload and unmounted, and
// the release may skip its node detach (decision 39). The state machine
// cannot read a clock, so it checks what it can: the claim is past and
// not yet node-detached, it was taken under the fence policy and the
// volume still has it, and the node is not ready (a node that came back
// does its own node detach).
func checkFenced(tx *txn, vol *structs.Volume, c *structs.Claim, req *structs.ClaimCheckpointRequest, name string) error {
	detached := structs.ClaimStateNodeDetached.Rank()
	switch {
	case c.State == structs.ClaimStateTaken:
		return structs.NewError(structs.CodeConflict, fmt.Sprintf("%s is live: only a past claim can be fenced", name))
	case c.State.Rank() >= detached:
		return structs.NewError(structs.CodeConflict, fmt.Sprintf("%s is %s: nothing is left to fence", name, c.State))
	case req.State.Rank() < detached:
		return structs.Invalid("state", fmt.Sprintf("a fenced checkpoint moves a claim to %s or later, not %s", structs.ClaimStateNodeDetached, req.State))
	case req.LeaseExpiredAt.IsZero():
		return structs.Invalid("lease_expired_at", "a fenced checkpoint must say when the lease ran out")
	}
	if p := structs.EffectiveNodeLost(c, vol); p != structs.NodeLostFence {
		return structs.NewError(structs.CodeConflict, fmt.Sprintf("%s follows node_lost %q, not %q: it cannot be fenced", name, p, structs.NodeLostFence))
	}
	if n := getNode(tx, c.NodeID); n != nil && n.Status == structs.NodeStatusReady {
		return structs.NewError(structs.CodeConflict, fmt.Sprintf("%s: node %s is ready again and detaches the volume itself", name, c.NodeID))
	}
	return nil
}
