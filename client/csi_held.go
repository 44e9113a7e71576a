package client

import (
	"fmt"
	"sort"

	"github.com/claimd/claimd/structs"
)

// NodeHeldVolume answers which allocations have a volume mounted on this
// node (the held claims this agent keeps), so that a server does not
// detach an attachment in use that its record no longer explains (after
// a snapshot restore, the record can be older than this node).
func (e *csiEndpoint) NodeHeldVolume(args *structs.ClientCSINodeHeldRequest, reply *structs.ClientCSINodeHeldResponse) error {
	if args.NodeID != e.a.ident.ID {
		return structs.Invalid("node_id", fmt.Sprintf("%q is not this node (%q)", args.NodeID, e.a.ident.ID))
	}
	for _, c := range e.a.held.list() {
		if c.VolumeID == args.VolumeID {
			reply.Allocs = append(reply.Allocs, c.AllocID)
		}
	}
	sort.Strings(reply.Allocs)
	return nil
}
