package endpoints

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

// Expand grows a volume: ControllerExpandVolume on a controller (when the
// plugin advertises the controller EXPAND_VOLUME), the new size recorded in
// one entry, then NodeExpandVolume on every node that may have it mounted
// (when the controller asks for it, or the plugin expands only on nodes). A node
// that cannot be reached is reported pending in the reply instead of the
// call failing: the capacity is already grown and recorded, and repeating
// the expansion, which every step allows, finishes the node.
func (v *Volume) Expand(args *structs.VolumeExpandRequest, reply *structs.VolumeExpandResponse) error {
	if done, err := v.srv.Forward("Volume.Expand", args, args, reply); done {
		return err
	}
	if _, err := v.auth.check("Volume.Expand", args); err != nil {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	vol, err := v.srv.State().VolumeByID(nil, args.VolumeID)
	if err != nil {
		return err
	}
	if vol == nil {
		return structs.NotFound("volume", args.VolumeID)
	}
	if args.Capacity < vol.Capacity {
		return structs.Invalid("capacity", fmt.Sprintf("%d is less than volume %q's %d bytes; shrinking is not supported",
			args.Capacity, vol.ID, vol.Capacity))
	}
	plug, err := v.plugin(vol.PluginID)
	if err != nil {
		return err
	}
	onController := hasController(plug, capExpandVolume)
	onNodes := plug.NodeCapabilities != nil && plug.NodeCapabilities.ExpandVolume
	if !onController && !onNodes {
		return structs.Invalid("volume_id", fmt.Sprintf("plugin %q advertises EXPAND_VOLUME neither as a controller nor as a node capability", plug.ID))
	}

	capacity, nodesNeeded := args.Capacity, true
	if onController {
		var out structs.ClientCSIControllerExpandResponse
		err := NewClientCSI(v.srv).ControllerExpandVolume(&structs.ClientCSIControllerExpandRequest{
			CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
			VolumeID:           vol.ID, ExternalID: vol.ExternalID, Capacity: args.Capacity,
			AccessMode: vol.AccessMode, AttachmentMode: vol.AttachmentMode, MountOptions: vol.MountOptions, Secrets: vol.Secrets,
		}, &out)
		if err != nil {
			return structs.Wrap(err, fmt.Sprintf("expand volume %q (external ID %q) with plugin %q; its size is unchanged",
				vol.ID, vol.ExternalID, vol.PluginID))
		}
		// The plugin's size is what the storage has (at least what was
		// asked, by the spec); one that does not say leaves the request's.
		if out.Capacity > 0 {
			capacity = out.Capacity
		}
		nodesNeeded = out.NodeExpansionRequired
	}
	_, index, err := v.srv.Apply(structs.VolumeCapacityRequestType, &structs.VolumeCapacityRequest{
		VolumeID: vol.ID, ExternalID: vol.ExternalID, Capacity: capacity})
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("plugin %q grew volume %q to %d bytes, but recording the size failed", vol.PluginID, vol.ID, capacity))
	}
	reply.Capacity, reply.Index = capacity, index
	if nodesNeeded && onNodes {
		reply.NodesExpanded, reply.NodesPending = v.expandOnNodes(vol, capacity)
	}
	v.srv.Logger().Info("volume expanded", "volume", vol.ID, "plugin", vol.PluginID, "capacity", capacity,
		"nodes_expanded", len(reply.NodesExpanded), "nodes_pending", len(reply.NodesPending), "index", index)
	now, err := v.srv.State().VolumeByID(nil, vol.ID)
	if err != nil {
		return err
	}
	if now != nil {
		reply.Volume = now.Sanitize()
	}
	return nil
}

// expandOnNodes runs NodeExpandVolume on every node that may have the
// volume staged or published: a claim that has not reached node-detached,
// live or being released (a node that went down keeps its claims past and
// the volume mounted until it is back). A node that is not ready is pending
// without a call; so is one whose call fails.
func (v *Volume) expandOnNodes(vol *structs.Volume, capacity int64) (expanded []string, pending map[string]string) {
	nodes := map[string]bool{}
	for _, c := range vol.AllClaims() {
		if c.State.Rank() < structs.ClaimStateNodeDetached.Rank() {
			nodes[c.NodeID] = true
		}
	}
	for _, id := range structs.SortedKeys(nodes) {
		reason := ""
		node, err := v.srv.State().NodeByID(nil, id)
		switch {
		case err != nil:
			reason = err.Error()
		case node == nil:
			reason = "node is not registered"
		case node.Status != structs.NodeStatusReady:
			reason = fmt.Sprintf("node is %s", node.Status)
		default:
			var out structs.ClientCSINodeExpandResponse
			err = NewClientCSI(v.srv).NodeExpandVolume(&structs.ClientCSINodeExpandRequest{
				NodeID: id, PluginID: vol.PluginID, VolumeID: vol.ID, ExternalID: vol.ExternalID, Capacity: capacity,
			}, &out)
			if err != nil {
				reason = err.Error()
			}
		}
		if reason == "" {
			expanded = append(expanded, id)
			continue
		}
		if pending == nil {
			pending = map[string]string{}
		}
		pending[id] = reason
		v.srv.Logger().Warn("node expansion pending", "volume", vol.ID, "node", id, "reason", reason)
	}
	return expanded, pending
}
