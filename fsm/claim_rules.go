package fsm

import (
	"fmt"
	"sort"
	"strings"

	"github.com/claimd/claimd/structs"
)

// The access-mode table of docs/architecture.md ("Access modes and
// claims"), as code:
//
//	access mode                 read claims          write claims
//	single-node-reader-only     1                    0
//	single-node-writer          1 alloc in total, read or write
//	multi-node-reader-only      unlimited            0
//	multi-node-single-writer    unlimited            1
//	multi-node-multi-writer     unlimited            unlimited
//	single-node-single-writer   1 alloc in total, read or write
//	single-node-multi-writer    unlimited, all on one node
//
// Past claims count against every limit until they are freed: a volume
// that is still attached to the old writer's node is not free for a new
// writer, whatever the old alloc's status (S1).

// writable reports whether an access mode allows write claims at all. A
// write claim on a read-only mode is a wrong request, not a busy volume, so
// it is refused as invalid rather than max_claims: retrying cannot help.
func writable(m structs.AccessMode) bool {
	return m != structs.AccessModeSingleNodeReader && m != structs.AccessModeMultiNodeReader
}

// checkClaimLimits returns a retryable max_claims error when a new claim
// of the given mode would break the access-mode table on v.
func checkClaimLimits(v *structs.Volume, mode structs.ClaimMode, nodeID string) error {
	var holders []*structs.Claim
	switch v.AccessMode {
	case structs.AccessModeSingleNodeReader, structs.AccessModeSingleNodeWriter, structs.AccessModeSingleNodeSingleWriter:
		holders = v.AllClaims()
	case structs.AccessModeSingleNodeMultiWriter:
		// One node at a time: any claim from another node, even one being
		// released, holds the volume there.
		for _, c := range v.AllClaims() {
			if c.NodeID != nodeID {
				holders = append(holders, c)
			}
		}
	case structs.AccessModeMultiNodeSingleWriter:
		if mode != structs.ClaimModeWrite {
			return nil
		}
		for _, c := range v.AllClaims() {
			if c.Mode == structs.ClaimModeWrite {
				holders = append(holders, c)
			}
		}
	default:
		return nil
	}
	if len(holders) == 0 {
		return nil
	}
	return structs.NewError(structs.CodeMaxClaims, fmt.Sprintf(
		"volume %q (%s) allows %s; held by %s", v.ID, v.AccessMode, limitText(v.AccessMode), describeClaims(holders)))
}

func limitText(m structs.AccessMode) string {
	switch m {
	case structs.AccessModeMultiNodeSingleWriter:
		return "one writer"
	case structs.AccessModeSingleNodeMultiWriter:
		return "one node"
	}
	return "one alloc"
}

// describeClaims lists claims in alloc ID order, a few at most, so the
// message is the same on every server and stays short.
func describeClaims(cs []*structs.Claim) string {
	sort.Slice(cs, func(i, j int) bool { return cs[i].AllocID < cs[j].AllocID })
	const show = 3
	var parts []string
	for i, c := range cs {
		if i == show {
			parts = append(parts, fmt.Sprintf("%d more", len(cs)-show))
			break
		}
		parts = append(parts, fmt.Sprintf("alloc %q (%s, %s)", c.AllocID, c.Mode, c.State))
	}
	return strings.Join(parts, ", ")
}

// checkModeCapability refuses a claim in a CSI 1.5 single-node mode on a
// node whose plugin does not advertise SINGLE_NODE_MULTI_WRITER: the
// plugin would not understand the mode it is asked to publish with.
// Invalid, not unschedulable: retrying does not teach the plugin.
func checkModeCapability(v *structs.Volume, n *structs.Node) error {
	if !v.AccessMode.NeedsSingleNodeMultiWriter() {
		return nil
	}
	fp := n.CSINodePlugins[v.PluginID]
	if fp != nil && fp.NodeCapabilities != nil && fp.NodeCapabilities.SingleNodeMultiWriter {
		return nil
	}
	return structs.Invalid("access_mode", fmt.Sprintf("volume %q is %s, and plugin %q on node %q does not advertise SINGLE_NODE_MULTI_WRITER",
		v.ID, v.AccessMode, v.PluginID, n.ID))
}
