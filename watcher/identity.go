package watcher

import (
	"fmt"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// otherIdentity refuses the node detach of a claim whose node ID is now
// held by another identity than the one that took the claim: an operator
// purged the ID (Node.Purge) and a node registered it again, with
// whatever secret. That node never had the volume mounted for this claim,
// and its "done" would free a volume the old node may still be writing
// to (issue 38). Such a claim waits for `volume detach -force`, exactly
// as a claim of a deregistered node does. nil: the claim's node is its
// own (or no node holds the ID, which the caller handles).
func otherIdentity(state *fsm.StateStore, vol *structs.Volume, c *structs.Claim) error {
	gen, held := state.NodeGeneration(c.NodeID)
	if !held || structs.ClaimOfIdentity(c, gen) {
		return nil
	}
	return fmt.Errorf("node %s was purged and its ID registered again by another node (claim taken at index %d, "+
		"the ID's current holder registered at %d): waiting for an operator (`claimd volume detach -force %s %s`)",
		c.NodeID, structs.ClaimTakenIndex(c), gen, vol.ID, c.NodeID)
}
