package fsm

import (
	"fmt"
	"strings"

	"github.com/claimd/claimd/structs"
)

// checkNodeVolumeLimit enforces a node plugin's max_volumes_per_node
// (CSIInfo.MaxVolumes). The limit is about attachments on the node, and a
// volume is attached from its first claim there until the last claim there
// is freed, so the count is the plugin's volumes with any claim on the
// node, live or past (the claim_node index). A claim for a volume the node
// already holds shares the attachment (decision 19) and adds nothing, so
// it is never refused here. The refusal is retryable: releases free
// volumes and the same claim may succeed later.
func checkNodeVolumeLimit(tx *txn, v *structs.Volume, n *structs.Node) error {
	fp := n.CSINodePlugins[v.PluginID]
	if fp == nil || fp.MaxVolumes <= 0 {
		return nil
	}
	var held []string
	for _, raw := range tx.all(TableVolumes, indexClaimNode, n.ID) {
		hv := raw.(*structs.Volume)
		if hv.PluginID != v.PluginID {
			continue
		}
		if hv.ID == v.ID {
			return nil
		}
		held = append(held, hv.ID)
	}
	if int64(len(held)) < fp.MaxVolumes {
		return nil
	}
	return structs.NewError(structs.CodeMaxClaims, fmt.Sprintf(
		"volume %q: node %q holds %d volumes of plugin %q, its limit (max_volumes_per_node) is %d: %s; retry once one is freed",
		v.ID, n.ID, len(held), v.PluginID, fp.MaxVolumes, describeVolumes(held)))
}

// describeVolumes lists volume IDs (already in index order, so the same on
// every server), a few at most, so the message stays short.
func describeVolumes(ids []string) string {
	const show = 3
	if len(ids) <= show {
		return quoteAll(ids)
	}
	return fmt.Sprintf("%s and %d more", quoteAll(ids[:show]), len(ids)-show)
}

func quoteAll(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = fmt.Sprintf("%q", id)
	}
	return strings.Join(q, ", ")
}

// checkTopology refuses a claim from a node its volume cannot be reached
// from. Unlike the other unschedulable refusals it is permanent for this
// (volume, node) pair: the message starts with structs.TopologyRefusal so
// the client agent fails the claim instead of retrying it.
func checkTopology(v *structs.Volume, n *structs.Node) error {
	var seg map[string]string
	if fp := n.CSINodePlugins[v.PluginID]; fp != nil {
		seg = fp.AccessibleTopology
	}
	if v.TopologyAllows(seg) {
		return nil
	}
	nodeText := structs.FormatSegments(seg)
	if nodeText == "" {
		nodeText = "none"
	}
	return structs.NewError(structs.CodeUnschedulable, fmt.Sprintf(
		"%svolume %q is accessible from %s; node %q's plugin %q segments are %s",
		structs.TopologyRefusal, v.ID, v.TopologyText(), n.ID, v.PluginID, nodeText))
}
