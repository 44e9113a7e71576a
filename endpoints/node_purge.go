package endpoints

import (
	"github.com/claimd/claimd/structs"
)

// Purge frees a deregistered node's ID (management token only): the ID is
// otherwise bound to the node's secret for the life of the cluster (issue
// 38). A registered node is refused: deregister it first. The reply lists
// the claims the node still holds and says what becomes of them: they wait
// for `volume detach -force` (the volume may still be mounted on the old
// node), and a node that registers the ID again, with any secret, never
// releases them: the release watcher sends a claim's node detach only to
// the identity that took it (structs.ClaimOfIdentity).
func (n *Node) Purge(args *structs.NodePurgeRequest, reply *structs.NodePurgeResponse) error {
	_, done, err := n.auth.gate("Node.Purge", args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	// Refused here before anything is written; the state machine checks
	// the same on every replica.
	state := n.srv.State()
	if node, err := state.NodeByID(nil, args.NodeID); err != nil {
		return err
	} else if node != nil {
		return structs.NewError(structs.CodeConflict, "node \""+args.NodeID+"\" is registered: deregister it first "+
			"(a purge frees only the ID of a node that is gone)")
	}
	_, index, err := n.srv.Apply(structs.NodePurgeRequestType, args)
	if err != nil {
		return err
	}
	vols, err := n.srv.State().VolumesByClaimNode(nil, args.NodeID)
	if err != nil {
		return err
	}
	reply.Claims = []string{}
	for _, v := range vols {
		for _, c := range v.AllClaims() {
			if c.NodeID == args.NodeID && structs.ClaimTakenIndex(c) < index {
				reply.Claims = append(reply.Claims, v.ID+"/"+c.AllocID)
			}
		}
	}
	reply.NodeID = args.NodeID
	reply.Note = structs.PurgeNote(args.NodeID, len(reply.Claims))
	reply.Index = index
	n.srv.Logger.Warn("node ID purged by an operator: its claims wait for volume detach -force",
		"node", args.NodeID, "claims", len(reply.Claims))
	return nil
}
