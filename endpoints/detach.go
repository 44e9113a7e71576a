package endpoints

import (
	"fmt"
	"slices"
	"strings"

	"github.com/claimd/claimd/structs"
)

// Detach releases every claim one node holds on a volume now, for an
// operator. Live claims become past claims (their allocations' workloads
// are assumed gone). With Force, claims that still wait for the node
// detach are moved past it: the node is gone for good, so nothing can
// unmount there; the skip is logged and recorded on each claim, and the
// controller detach still runs.
func (v *Volume) Detach(args *structs.VolumeDetachRequest, reply *structs.VolumeDetachResponse) error {
	_, done, err := v.auth.gate("Volume.Detach", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("volume_id", args.VolumeID); err != nil {
		return err
	}
	if err := structs.ValidateID("node_id", args.NodeID); err != nil {
		return err
	}
	vol, err := v.registered(args.VolumeID)
	if err != nil {
		return err
	}
	var underway []string // claims already being released, left as they are
	for _, c := range vol.AllClaims() {
		if c.NodeID != args.NodeID {
			continue
		}
		if c.State != structs.ClaimStateTaken && !args.Force && (c.OperatorReleased || structs.EffectiveNodeLost(c, vol) != structs.NodeLostManual) {
			underway = append(underway, fmt.Sprintf("alloc %q (%s)", c.AllocID, c.State))
		}
		if c.State == structs.ClaimStateTaken {
			res, index, err := v.srv.SubmitClaim(&structs.VolumeClaimRequest{VolumeID: c.VolumeID, AllocID: c.AllocID, Release: true})
			if err == nil {
				err = res.Err()
			}
			if err != nil {
				return structs.Wrap(err, fmt.Sprintf("release claim of alloc %q", c.AllocID))
			}
			reply.Index = index
			reply.Released = append(reply.Released, c.AllocID)
			c = c.Copy()
			c.State = structs.ClaimStateUnpublishing
		}
		if !args.Force && !c.OperatorReleased && structs.EffectiveNodeLost(c, vol) == structs.NodeLostManual {
			// The operator's go-ahead a node_lost manual claim waits for:
			// its release goes on with the node detach (when the node is
			// there) as usual.
			cp := &structs.ClaimCheckpointRequest{VolumeID: c.VolumeID, AllocID: c.AllocID,
				State: c.State, ExpectedState: c.State, OperatorReleased: true}
			_, index, err := v.srv.Apply(structs.ClaimCheckpointRequestType, cp)
			if err != nil {
				return structs.Wrap(err, fmt.Sprintf("release claim of alloc %q", c.AllocID))
			}
			reply.Index = index
			if !slices.Contains(reply.Released, c.AllocID) {
				reply.Released = append(reply.Released, c.AllocID)
			}
		}
		if args.Force && c.State.Rank() < structs.ClaimStateNodeDetached.Rank() {
			v.srv.Logger.Warn("operator forced a claim past its node detach: the node's mounts were not cleaned up",
				"volume", c.VolumeID, "alloc", c.AllocID, "node", c.NodeID)
			cp := &structs.ClaimCheckpointRequest{VolumeID: c.VolumeID, AllocID: c.AllocID,
				State: structs.ClaimStateNodeDetached, ExpectedState: c.State, ForcedSkip: true}
			_, index, err := v.srv.Apply(structs.ClaimCheckpointRequestType, cp)
			if err != nil {
				return structs.Wrap(err, fmt.Sprintf("force claim of alloc %q", c.AllocID))
			}
			reply.Index = index
			reply.Forced = append(reply.Forced, c.AllocID)
		}
	}
	if len(reply.Released) == 0 && len(reply.Forced) == 0 {
		if len(underway) > 0 {
			// A plain detach has nothing to add to a release under way:
			// say what it waits for and what would end the wait.
			return structs.NewError(structs.CodeConflict, fmt.Sprintf(
				"the release of %s on volume %q is already under way%s; if node %q is gone for good and its mounts are not in use, "+
					"`claimd volume detach -force %s %s` skips its unmount (check the node first: see docs/operations.md, \"Forcing a detach\")",
				strings.Join(underway, ", "), args.VolumeID, v.nodeWait(args.NodeID), args.NodeID, args.VolumeID, args.NodeID))
		}
		return structs.NewError(structs.CodeNotFound, fmt.Sprintf("node %q holds no claim on volume %q that this could release", args.NodeID, args.VolumeID))
	}
	return nil
}

// nodeWait says why a release on the node waits, when its status says.
func (v *Volume) nodeWait(nodeID string) string {
	n, err := v.srv.State().NodeByID(nil, nodeID)
	switch {
	case err != nil:
		return ""
	case n == nil:
		return " (the node is deregistered: its unmount cannot come)"
	case n.Status != structs.NodeStatusReady:
		return fmt.Sprintf(" (node %q is %s: its unmount waits for it to come back)", nodeID, n.Status)
	}
	return ""
}
