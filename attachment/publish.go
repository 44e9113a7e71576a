package attachment

import (
	"fmt"

	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/structs"
)

// Publish makes sure a live claim on a plugin that needs a controller has
// its node controller-attached before the node may stage it. A new claim
// is published here. A re-claim whose claim is not published yet gets a
// retryable "in progress" while a publish of it runs on this server, or
// publishes itself when no one is (the server that started died or lost
// leadership before recording it).
//
// record writes the publish (its context) to the claim; it runs while the
// (volume, node) lock is held, so an unpublish on the node decides only
// after the publish is in the log. release gives the claim up when the
// controller refused or failed, so that the release path cleans up
// whatever the plugin half did. When another call published the claim
// while this one waited, Publish returns that claim and records nothing.
func (m *Manager) Publish(claim *structs.Claim, record func(publishContext map[string]string) error, release func()) (published *structs.Claim, err error) {
	if claim.ControllerPublished {
		return nil, nil
	}
	// The lease first: what follows is decided on state read after it
	// (decision 46). A claim just committed by this leader is its proof.
	g, err := m.lease.Begin()
	if err != nil {
		return nil, structs.Wrap(err, fmt.Sprintf("controller publish of volume %q", claim.VolumeID))
	}
	state := m.state.State()
	vol, err := state.VolumeByID(nil, claim.VolumeID)
	if err != nil || vol == nil {
		return nil, err
	}
	plug, err := state.PluginSummary(nil, vol.PluginID)
	if err != nil {
		return nil, err
	}
	if plug == nil || !plug.ControllerRequired {
		return nil, nil
	}
	done, ok := m.pubs.begin(claim.VolumeID + "/" + claim.AllocID)
	if !ok {
		return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf(
			"controller publish of volume %q for alloc %q is in progress; retry", claim.VolumeID, claim.AllocID))
	}
	defer done()
	// No unpublish of this volume from this node may run while we publish.
	unlock := m.locks.Lock(claim.VolumeID, claim.NodeID)
	defer unlock()
	// It may have been published while we waited for the tracker.
	if vol, err = m.state.State().VolumeByID(nil, claim.VolumeID); err == nil && vol != nil {
		if c := vol.LiveClaim(claim.AllocID); c != nil && c.ControllerPublished {
			return c.Copy(), nil
		}
		// An attachment is per (volume, node) (decision 19). One this node
		// holds for another live claim serves this one too when it allows
		// what this claim does (read-write serves a reader). One that
		// cannot serve it (read-only for a writer; read-write for a reader
		// whose claim is being released) must go first: asking the
		// controller for the node again with the other read-only flag is
		// what plugins refuse (AlreadyExists), so the claim waits,
		// retryable, taken and unpublished, until the release has detached
		// it. Unpublish detaches only when no live published claim on the
		// node is left.
		share, blocker := NodeAttachment(vol, claim)
		if share != nil {
			return nil, record(share.PublishContext)
		}
		if blocker != nil {
			how := "read-write"
			if blocker.Mode == structs.ClaimModeRead {
				how = "read-only"
			}
			return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf(
				"volume %q is attached %s to node %q for alloc %q (%s); this %s claim waits until that attachment is released; retry",
				vol.ID, how, claim.NodeID, blocker.AllocID, blocker.State, claim.Mode))
		}
	}
	return nil, m.controllerPublish(g, claim, record, release)
}

// NodeAttachment looks at the other claims on the claim's node that hold
// a controller attachment (published and not yet controller-detached). It
// returns a live one whose attachment serves the claim, or else one whose
// attachment has the other read-only flag (which the claim must wait
// out), or neither: then the controller is asked (for the same flag a
// plugin answers an attachment it has as a success).
func NodeAttachment(vol *structs.Volume, claim *structs.Claim) (share, blocker *structs.Claim) {
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
// the publish fails, the claim is released at once.
func (m *Manager) controllerPublish(g *leaderlease.Grant, claim *structs.Claim, record func(map[string]string) error, release func()) error {
	vol, err := m.state.State().VolumeByID(nil, claim.VolumeID)
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
	err = m.controllerCall(g, "ClientCSI.ControllerAttachVolume", &attach.CSIControllerQuery, &attach.NodeRouting, attach, &attached,
		func(node string) { attached.ControllerNodeID = node })
	if isLeaseRefusal(err) {
		// Nothing was asked of the controller: the claim stays taken and
		// unpublished, and the client's retry (on whichever server leads
		// then) publishes it. The error says the claim got as far as the
		// publish, like any publish failure: its outcome is not a refusal.
		return structs.Wrap(err, fmt.Sprintf("controller publish of volume %q", claim.VolumeID))
	}
	if err != nil {
		release()
		return structs.Wrap(err, fmt.Sprintf("controller publish of volume %q", claim.VolumeID))
	}
	return record(attached.PublishContext)
}
