package fsm

import (
	"errors"
	"fmt"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.ClaimBatchRequestType, applyClaimBatchWithoutStatements)
	registerCommand(structs.ClaimBatchDetachedRequestType, applyClaimBatch)
}

// applyClaimBatchWithoutStatements applies a type-9 claim batch as every
// server has always applied it: a NodeDetached statement in it is not
// honoured (an older server does not know the field), so only type 29
// entries, written once every server applies them, free in the release.
func applyClaimBatchWithoutStatements(tx *txn, req *structs.ClaimBatchRequest) (any, error) {
	for _, r := range req.Claims {
		if r != nil {
			r.NodeDetached = false
		}
	}
	return applyClaimBatch(tx, req)
}

// applyClaimBatch applies claims and releases in order, each against the
// state the earlier items left. An item's refusal is its own result: the
// batch is only a way to put many callers' requests in one Raft round, so
// one caller's bad request must not fail the others. The entry as a whole
// is refused only when it carries no items.
func applyClaimBatch(tx *txn, req *structs.ClaimBatchRequest) (any, error) {
	if len(req.Claims) == 0 {
		return nil, structs.Invalid("claims", "must not be empty")
	}
	resp := &structs.ClaimBatchResponse{Results: make([]*structs.ClaimResult, len(req.Claims))}
	for i, r := range req.Claims {
		var (
			claim *structs.Claim
			isNew bool
			err   error
		)
		if err = r.Validate(); err == nil {
			if r.Release {
				claim, err = releaseClaim(tx, r)
			} else {
				claim, isNew, err = takeClaim(tx, r)
			}
		}
		if err != nil {
			resp.Results[i] = &structs.ClaimResult{Error: asCoded(err)}
			continue
		}
		resp.Results[i] = &structs.ClaimResult{Claim: claim.Copy(), New: isNew}
	}
	return resp, nil
}

// takeClaim admits one claim. Every check comes before the one write, so a
// refused item leaves nothing behind for the items after it. The order of
// checks is part of the behaviour (which error a bad request gets) and so
// of determinism: keep it.
func takeClaim(tx *txn, r *structs.VolumeClaimRequest) (*structs.Claim, bool, error) {
	old := getVolume(tx, r.VolumeID)
	if old == nil {
		return nil, false, structs.NotFound("volume", r.VolumeID)
	}
	a := getAlloc(tx, r.AllocID)
	if a == nil {
		return nil, false, structs.NotFound("alloc", r.AllocID)
	}
	if a.NodeID != r.NodeID {
		return nil, false, structs.Invalid("node_id", fmt.Sprintf("alloc %q is placed on node %q, not %q", a.ID, a.NodeID, r.NodeID))
	}
	if a.Terminal() {
		return nil, false, structs.Invalid("alloc_id", fmt.Sprintf("alloc %q is %s and cannot claim", a.ID, a.ClientStatus))
	}
	if a.DesiredStatus == structs.AllocDesiredStop {
		return nil, false, structs.Invalid("alloc_id", fmt.Sprintf("alloc %q is being stopped and cannot claim", a.ID))
	}
	vr := a.VolumeRequest(r.VolumeID)
	if vr == nil {
		return nil, false, structs.Invalid("volume_id", fmt.Sprintf("alloc %q does not request volume %q", a.ID, r.VolumeID))
	}
	if r.Mode == structs.ClaimModeWrite && vr.ReadOnly {
		return nil, false, structs.Invalid("mode", fmt.Sprintf("alloc %q requests volume %q read-only", a.ID, r.VolumeID))
	}

	// A re-claim by the same alloc returns what it already holds, so a
	// client that retries after a lost reply does not need to know whether
	// the first try went through; New stays false, so it is not published
	// twice (S5).
	if c := old.Claim(a.ID); c != nil {
		if c.State != structs.ClaimStateTaken {
			// Retryable: once the old claim is freed (its controller
			// publish failed, or an operator detached it) the alloc may
			// claim afresh, and that claim is new and published again.
			return nil, false, structs.NewError(structs.CodeMaxClaims, fmt.Sprintf(
				"alloc %q's earlier claim on volume %q is being released (%s); retry once it is freed", a.ID, old.ID, c.State))
		}
		if c.Mode != r.Mode {
			return nil, false, structs.NewError(structs.CodeConflict, fmt.Sprintf(
				"alloc %q already holds a %s claim on volume %q", a.ID, c.Mode, old.ID))
		}
		return c, false, nil
	}

	if r.AccessMode != "" && r.AccessMode != old.AccessMode {
		return nil, false, structs.Invalid("access_mode", fmt.Sprintf("volume %q is %s, not %s", old.ID, old.AccessMode, r.AccessMode))
	}
	if r.AttachmentMode != "" && r.AttachmentMode != old.AttachmentMode {
		return nil, false, structs.Invalid("attachment_mode", fmt.Sprintf("volume %q is %s, not %s", old.ID, old.AttachmentMode, r.AttachmentMode))
	}
	if r.Mode == structs.ClaimModeWrite && !writable(old.AccessMode) {
		return nil, false, structs.Invalid("mode", fmt.Sprintf("volume %q is %s: write claims are not allowed", old.ID, old.AccessMode))
	}
	n := getNode(tx, r.NodeID)
	if n == nil {
		return nil, false, structs.NotFound("node", r.NodeID)
	}
	if n.Status != structs.NodeStatusReady {
		return nil, false, structs.NewError(structs.CodeUnschedulable, fmt.Sprintf("node %q is %s", n.ID, n.Status))
	}
	if !n.Eligible() {
		// Drained or marked ineligible: the node takes no new claim (a
		// re-claim of one it holds was answered above). Which of the two
		// the state does not say, so the message names both and the way
		// back.
		return nil, false, structs.NewError(structs.CodeUnschedulable, fmt.Sprintf(
			"node %q is ineligible for new claims (a drain or `claimd node eligibility -disable`; `claimd node eligibility -enable %s` undoes it)", n.ID, n.ID))
	}
	if ok, why := schedulable(tx, old.PluginID, n.ID); !ok {
		return nil, false, structs.NewError(structs.CodeUnschedulable, fmt.Sprintf("volume %q: %s", old.ID, why))
	}
	if err := checkModeCapability(old, n); err != nil {
		return nil, false, err
	}
	if err := checkTopology(old, n); err != nil {
		return nil, false, err
	}
	if err := checkClaimLimits(old, r.Mode, n.ID); err != nil {
		return nil, false, err
	}
	if err := checkNodeVolumeLimit(tx, old, n); err != nil {
		return nil, false, err
	}
	extID := ""
	if fp := n.CSINodePlugins[old.PluginID]; fp != nil {
		extID = fp.ExternalNodeID
	}
	switch {
	case r.ExternalNodeID == "":
	case extID == "":
		extID = r.ExternalNodeID
	case extID != r.ExternalNodeID:
		return nil, false, structs.Invalid("external_node_id", fmt.Sprintf(
			"%q does not match node %q's fingerprint %q", r.ExternalNodeID, n.ID, extID))
	}

	c := &structs.Claim{
		VolumeID: old.ID, AllocID: a.ID, NodeID: n.ID, ExternalNodeID: extID,
		Mode: r.Mode, AccessMode: old.AccessMode, AttachmentMode: old.AttachmentMode,
		State: structs.ClaimStateTaken, NodeLost: old.NodeLost.OrWait(), CreateIndex: tx.index, ModifyIndex: tx.index,
		Steps: []structs.ClaimStep{{State: structs.ClaimStateTaken, Index: tx.index, Time: tx.at}},
	}
	v := cowVolume(old, tx.index)
	if r.Mode == structs.ClaimModeWrite {
		v.WriteClaims = putClaim(v.WriteClaims, c)
	} else {
		v.ReadClaims = putClaim(v.ReadClaims, c)
	}
	if v.CurrentAccessMode == "" {
		v.CurrentAccessMode, v.CurrentAttachmentMode = old.AccessMode, old.AttachmentMode
	}
	tx.put(TableVolumes, v)
	return c, true, nil
}

func putClaim(m map[string]*structs.Claim, c *structs.Claim) map[string]*structs.Claim {
	if m == nil {
		m = map[string]*structs.Claim{}
	}
	m[c.AllocID] = c
	return m
}

// releaseClaim turns an alloc's live claim into a past claim and queues a
// GC eval. Releasing what is already past, or was never claimed, succeeds
// without change: a release may be retried, and may race the alloc's own
// terminal update.
func releaseClaim(tx *txn, r *structs.VolumeClaimRequest) (*structs.Claim, error) {
	old := getVolume(tx, r.VolumeID)
	if old == nil {
		return nil, structs.NotFound("volume", r.VolumeID)
	}
	if old.LiveClaim(r.AllocID) == nil {
		return old.PastClaims[r.AllocID], nil
	}
	v := cowVolume(old, tx.index)
	live := old.LiveClaim(r.AllocID)
	makePast(tx, v, r.AllocID)
	if r.NodeDetached && r.ClaimIndex != 0 && r.ClaimIndex == structs.ClaimTakenIndex(live) && holderSays(tx, live, r.NodeID) {
		return releaseDetached(tx, v, r.AllocID), nil
	}
	ensurePendingEval(tx, v, structs.EvalTriggerClaimRelease)
	tx.put(TableVolumes, v)
	return v.PastClaims[r.AllocID], nil
}

// holderSays reports whether node may say it node-detached claim c: it is
// the claim's node and the identity that took it (after a purge, whatever
// registered the node ID never had the volume mounted for this claim, as
// checkClaimsIdentity has it for a checkpoint).
func holderSays(tx *txn, c *structs.Claim, node string) bool {
	if node == "" || c.NodeID != node {
		return false
	}
	gen, held := generation(tx, node)
	return held && structs.ClaimOfIdentity(c, gen)
}

// releaseDetached finishes a release whose holding node has done the node
// detach itself (VolumeClaimRequest.NodeDetached, checked by the caller
// against the claim's node): the claim, just made past in v (a cowVolume
// copy), passes node-detached in the same entry and is freed at once when
// its plugin needs no controller detach, as the release watcher's one
// checkpoint would (decision 16); otherwise it stays node-detached with a
// pending eval, and the watcher does only the controller detach. Nothing
// here reads anything but the entry and the state (S2); the plugin's
// ControllerRequired is the same row the watcher decides on. A plugin
// with no row left stops at node-detached: the watcher says why.
func releaseDetached(tx *txn, v *structs.Volume, allocID string) *structs.Claim {
	c := v.PastClaims[allocID].WithStep(structs.ClaimStateNodeDetached, tx.index, tx.at)
	row := getPluginRow(tx, v.PluginID)
	if row == nil || row.requiring > 0 {
		v.PastClaims[allocID] = c
		ensurePendingEval(tx, v, structs.EvalTriggerClaimRelease)
		tx.put(TableVolumes, v)
		return c
	}
	delete(v.PastClaims, allocID)
	keepReleased(v, c.WithStep(structs.ClaimStateFreed, tx.index, tx.at))
	tidyClaims(v)
	if len(v.PastClaims) == 0 {
		completeVolumeEvals(tx, v, "all past claims freed")
	} else {
		ensurePendingEval(tx, v, structs.EvalTriggerClaimRelease)
	}
	tx.put(TableVolumes, v)
	return nil
}

// asCoded keeps a refusal's code; every refusal this package makes is
// coded, the fallback only guards against a future one that is not.
func asCoded(err error) *structs.CodedError {
	var ce *structs.CodedError
	if errors.As(err, &ce) {
		return ce
	}
	return structs.NewError(structs.CodeInvalid, err.Error())
}
