package endpoints

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

// Claim claims a volume for an allocation, or releases the allocation's
// claim (Release: true): one RPC for both (seed 3). At the leader, claims
// that arrive together are committed as one claim batch entry. A new claim
// on a plugin that needs a controller is then published by a controller
// (ControllerPublish only for new claims, never for a release: S5), and the
// publish context is stored on the claim.
func (v *Volume) Claim(args *structs.VolumeClaimRequest, reply *structs.VolumeClaimResponse) error {
	// A client agent claims and releases only for allocations on its own
	// node (see claimNode). Checked before validation, like every call: a
	// caller that may not make it learns nothing from its arguments.
	c, done, err := v.auth.gate("Volume.Claim", args, reply, v.auth.forNode("Volume.Claim", func() (string, bool) { return claimNode(v.srv, args) }))
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	// The token and the origin have done their work: neither is written
	// to the log.
	args.AuthToken, args.Origin = "", structs.CallOrigin{}
	res, index, err := v.srv.SubmitClaim(args)
	if err != nil {
		return err
	}
	reply.Index = index
	if err := res.Err(); err != nil {
		return err
	}
	reply.Claim = res.Claim
	reply.New = res.New
	if args.Release || res.Claim == nil {
		return nil
	}
	if vol, err := v.srv.State().VolumeByID(nil, args.VolumeID); err == nil && vol != nil {
		// The spec without its claims: a shallow copy, since stored
		// objects are never modified and the reply is only encoded (a deep
		// copy cost O(claims on the volume) per claim).
		spec := *vol
		spec.ReadClaims, spec.WriteClaims, spec.PastClaims = nil, nil, nil
		// The volume's secrets go only to the node that holds the claim,
		// authenticated by its node secret.
		if !c.isNode(res.Claim.NodeID) {
			spec.Secrets = nil
		}
		reply.Volume = &spec
	}
	return v.ensurePublished(res.Claim, reply)
}

// ensurePublished makes sure a live claim on a plugin that needs a
// controller has been controller-published before the node may stage it. A
// new claim is published here. A re-claim whose claim is not published yet
// gets a retryable "in progress" while the publish runs on this server, or
// publishes itself when no one is publishing it (the server that started
// died or lost leadership before recording it).
func (v *Volume) ensurePublished(claim *structs.Claim, reply *structs.VolumeClaimResponse) error {
	if claim.ControllerPublished {
		return nil
	}
	state := v.srv.State()
	vol, err := state.VolumeByID(nil, claim.VolumeID)
	if err != nil || vol == nil {
		return err
	}
	plug, err := state.PluginSummary(nil, vol.PluginID)
	if err != nil {
		return err
	}
	if plug == nil || !plug.ControllerRequired {
		return nil
	}
	done, ok := v.srv.Publishes().Begin(claim.VolumeID + "/" + claim.AllocID)
	if !ok {
		return structs.NewError(structs.CodeUnavailable, fmt.Sprintf(
			"controller publish of volume %q for alloc %q is in progress; retry", claim.VolumeID, claim.AllocID))
	}
	defer done()
	// No unpublish of this volume from this node may run while we publish
	// (see watcher.AttachLocks).
	unlock := v.srv.AttachLocks().Lock(claim.VolumeID, claim.NodeID)
	defer unlock()
	// It may have been published while we waited for the tracker.
	if vol, err = state.VolumeByID(nil, claim.VolumeID); err == nil && vol != nil {
		if c := vol.LiveClaim(claim.AllocID); c != nil && c.ControllerPublished {
			reply.Claim = c.Copy()
			return nil
		}
		// An attachment is per (volume, node) (decision 19). One this node
		// holds for another live claim serves this one too when it allows
		// what this claim does (read-write serves a reader). One that
		// cannot serve it (read-only for a writer; read-write for a reader
		// whose claim is being released) must go first: asking the
		// controller for the node again with the other read-only flag is
		// what plugins refuse (AlreadyExists), so the claim waits,
		// retryable, taken and unpublished, until the watcher has detached
		// it. The watcher detaches only when no live published claim on the
		// node is left.
		share, blocker := nodeAttachment(vol, claim)
		if share != nil {
			return v.recordPublished(claim, share.PublishContext, reply)
		}
		if blocker != nil {
			how := "read-write"
			if blocker.Mode == structs.ClaimModeRead {
				how = "read-only"
			}
			return structs.NewError(structs.CodeUnavailable, fmt.Sprintf(
				"volume %q is attached %s to node %q for alloc %q (%s); this %s claim waits until that attachment is released; retry",
				vol.ID, how, claim.NodeID, blocker.AllocID, blocker.State, claim.Mode))
		}
	}
	return v.controllerPublish(claim, reply)
}

// nodeAttachment looks at the other claims on the claim's node that hold
// a controller attachment (published and not yet controller-detached). It
// returns a live one whose attachment serves the claim, or else one whose
// attachment has the other read-only flag (which the claim must wait
// out), or neither: then the controller is asked (for the same flag a
// plugin answers an attachment it has as a success).
func nodeAttachment(vol *structs.Volume, claim *structs.Claim) (share, blocker *structs.Claim) {
	for _, other := range vol.AllClaims() {
		if other.AllocID == claim.AllocID || other.NodeID != claim.NodeID || !other.ControllerPublished ||
			other.State.Rank() >= structs.ClaimStateControllerDetached.Rank() {
			continue
		}
		live := other.State == structs.ClaimStateTaken
		if live && (other.Mode == structs.ClaimModeWrite || claim.Mode == structs.ClaimModeRead) {
			return other, nil
		}
		if other.Mode != claim.Mode && blocker == nil {
			blocker = other
		}
	}
	return nil, blocker
}

// controllerPublish runs ControllerPublish for a claim and records it. If
// the publish fails, the claim is released at once so that the
// server-driven detach cleans up whatever the plugin half did.
func (v *Volume) controllerPublish(claim *structs.Claim, reply *structs.VolumeClaimResponse) error {
	vol, err := v.srv.State().VolumeByID(nil, claim.VolumeID)
	if err != nil || vol == nil {
		return err
	}
	attach := &structs.ClientCSIControllerAttachRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
		VolumeID:           vol.ID,
		ExternalID:         vol.ExternalID,
		ExternalNodeID:     claim.ExternalNodeID,
		AccessMode:         vol.AccessMode,
		AttachmentMode:     vol.AttachmentMode,
		ReadOnly:           claim.Mode == structs.ClaimModeRead,
		MountOptions:       vol.MountOptions,
		Secrets:            vol.Secrets,
		VolumeContext:      vol.Context,
	}
	var attached structs.ClientCSIControllerAttachResponse
	if err := (&ClientCSI{srv: v.srv}).ControllerAttachVolume(attach, &attached); err != nil {
		release := &structs.VolumeClaimRequest{VolumeID: claim.VolumeID, AllocID: claim.AllocID, Release: true}
		if _, _, rerr := v.srv.SubmitClaim(release); rerr != nil {
			v.srv.Logger().Error("releasing a claim whose controller publish failed", "volume", claim.VolumeID,
				"alloc", claim.AllocID, "error", rerr)
		}
		return structs.Wrap(err, fmt.Sprintf("controller publish of volume %q", claim.VolumeID))
	}
	return v.recordPublished(claim, attached.PublishContext, reply)
}

// recordPublished records on the claim that its node holds the controller
// attachment, with the attachment's publish context.
func (v *Volume) recordPublished(claim *structs.Claim, publishContext map[string]string, reply *structs.VolumeClaimResponse) error {
	cp := &structs.ClaimCheckpointRequest{
		VolumeID: claim.VolumeID, AllocID: claim.AllocID,
		State: structs.ClaimStateTaken, ExpectedState: structs.ClaimStateTaken,
		PublishContext: publishContext, ControllerPublished: true,
	}
	resp, index, err := v.srv.Apply(structs.ClaimCheckpointRequestType, cp)
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("record publish context of volume %q", claim.VolumeID))
	}
	reply.Index = index
	if r, ok := resp.(*structs.ClaimCheckpointResponse); ok && r.Claim != nil {
		reply.Claim = r.Claim
	} else {
		reply.Claim.PublishContext = publishContext
	}
	return nil
}

// claimNode is the node a claim or release acts for. A claim names it (the
// state machine checks the allocation is placed there). A release acts for
// the node the allocation is placed on, whatever node the request names:
// the state machine does not check a release's node, so a node that named
// itself could release another node's claim. No allocation, no node: only
// a token that grants volume:claim may release then.
func claimNode(srv Server, args *structs.VolumeClaimRequest) (string, bool) {
	if !args.Release {
		return args.NodeID, true
	}
	if a, err := srv.State().AllocByID(nil, args.AllocID); err == nil && a != nil {
		return a.NodeID, true
	}
	// An allocation this server does not have (yet): its node is unknown
	// here. The server that serves the call refuses a node secret for it.
	return "", false
}
