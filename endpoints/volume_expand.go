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
	_, done, err := v.auth.gate("Volume.Expand", args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	vol, err := v.registered(args.VolumeID)
	if err != nil {
		return err
	}
	index, err := v.grow(vol, growth{capacity: args.Capacity, field: "capacity", capField: "volume_id"}, &reply.VolumeExpansion)
	if err != nil {
		return err
	}
	reply.Index = index
	now, err := v.srv.State().VolumeByID(nil, vol.ID)
	if err != nil {
		return err
	}
	if now != nil {
		reply.Volume = now.Sanitize()
	}
	return nil
}

// growth is a request to grow a volume, from `volume expand`, or from a
// register or create that asks for more than is recorded: the one rule for
// all three. The fields are what the request calls the size and what asks
// for the plugin's expansion capability, for the errors.
type growth struct {
	capacity int64 // required bytes
	limit    int64 // limit bytes; 0 leaves it to the plugin
	field    string
	capField string
}

// expansion is a growth checked against the volume and its plugin: which
// of the plugin's services grow it.
type expansion struct {
	growth
	vol          *structs.Volume
	onController bool
	onNodes      bool
}

// checkGrowth refuses, before any call, a growth that would shrink the
// volume or that its plugin cannot do, as invalid naming the field.
// Growing to the recorded size is allowed: every step is idempotent, and
// a repeat finishes the nodes a previous expansion left pending.
func (v *Volume) checkGrowth(vol *structs.Volume, g growth) (*expansion, error) {
	if g.capacity < vol.Capacity {
		return nil, structs.Invalid(g.field, fmt.Sprintf("%d is less than volume %q's %d bytes; shrinking is not supported",
			g.capacity, vol.ID, vol.Capacity))
	}
	plug, err := v.plugin(vol.PluginID)
	if err != nil {
		return nil, err
	}
	x := &expansion{growth: g, vol: vol,
		onController: hasController(plug, capExpandVolume),
		onNodes:      nodesCanExpand(plug, vol)}
	if !x.onController && !x.onNodes {
		return nil, structs.Invalid(g.capField, fmt.Sprintf("plugin %q advertises EXPAND_VOLUME neither as a controller nor as a node capability", plug.ID))
	}
	return x, nil
}

// grow checks a growth and runs it (run); it returns the capacity entry's
// index.
func (v *Volume) grow(vol *structs.Volume, g growth, out *structs.VolumeExpansion) (uint64, error) {
	x, err := v.checkGrowth(vol, g)
	if err != nil {
		return 0, err
	}
	return v.run(x, out)
}

// run does a checked expansion's three steps: the controller, the capacity
// entry, the nodes.
func (v *Volume) run(x *expansion, out *structs.VolumeExpansion) (uint64, error) {
	vol := x.vol
	capacity, nodesNeeded := x.capacity, true
	if x.onController {
		var grown structs.ClientCSIControllerExpandResponse
		err := csiOf(v.srv).ControllerExpandVolume(&structs.ClientCSIControllerExpandRequest{
			CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
			VolumeID:           vol.ID, ExternalID: vol.ExternalID, Capacity: x.capacity, CapacityMax: x.limit,
			AccessMode: vol.AccessMode, AttachmentMode: vol.AttachmentMode, MountOptions: vol.MountOptions, Secrets: vol.Secrets,
		}, &grown)
		if err != nil {
			return 0, structs.Wrap(err, fmt.Sprintf("expand volume %q (external ID %q) with plugin %q; its size is unchanged",
				vol.ID, vol.ExternalID, vol.PluginID))
		}
		// The plugin's size is what the storage has (at least what was
		// asked, by the spec); one that does not say leaves the request's.
		if grown.Capacity > 0 {
			capacity = grown.Capacity
		}
		nodesNeeded = grown.NodeExpansionRequired
	}
	_, index, err := v.srv.Apply(structs.VolumeCapacityRequestType, &structs.VolumeCapacityRequest{
		VolumeID: vol.ID, ExternalID: vol.ExternalID, Capacity: capacity})
	if err != nil {
		return 0, structs.Wrap(err, fmt.Sprintf("plugin %q grew volume %q to %d bytes, but recording the size failed", vol.PluginID, vol.ID, capacity))
	}
	*out = structs.VolumeExpansion{VolumeID: vol.ID, Previous: vol.Capacity, Capacity: capacity, CapacityIndex: index}
	if nodesNeeded && x.onNodes {
		out.NodesExpanded, out.NodesPending = v.expandOnNodes(vol, capacity, x.limit)
	}
	v.srv.Logger.Info("volume expanded", "volume", vol.ID, "plugin", vol.PluginID, "from", vol.Capacity, "capacity", capacity,
		"nodes_expanded", len(out.NodesExpanded), "nodes_pending", len(out.NodesPending), "index", index)
	return index, nil
}

// expandOnNodes runs NodeExpandVolume on every node that may have the
// volume staged or published: a claim that has not reached node-detached,
// live or being released (a node that went down keeps its claims past and
// the volume mounted until it is back). A node that is not ready is pending
// without a call; so is one whose call fails.
func (v *Volume) expandOnNodes(vol *structs.Volume, capacity, limit int64) (expanded []string, pending map[string]string) {
	plug, _ := v.srv.State().PluginByID(nil, vol.PluginID)
	for _, id := range structs.SortedKeys(claimNodes(vol)) {
		if plug != nil && !nodeCaps(plug, id).ExpandVolume {
			// This node's own plugin does not expand (the summary's
			// capabilities are one node's word, not every node's).
			continue
		}
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
			err = csiOf(v.srv).NodeExpandVolume(&structs.ClientCSINodeExpandRequest{
				NodeID: id, PluginID: vol.PluginID, VolumeID: vol.ID, ExternalID: vol.ExternalID, Capacity: capacity, CapacityMax: limit,
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
		v.srv.Logger.Warn("node expansion pending", "volume", vol.ID, "node", id, "reason", reason)
	}
	return expanded, pending
}

// claimNodes are the nodes where the volume is staged or published (a
// claim not yet node-detached).
func claimNodes(vol *structs.Volume) map[string]bool {
	nodes := map[string]bool{}
	for _, c := range vol.AllClaims() {
		if c.State.Rank() < structs.ClaimStateNodeDetached.Rank() {
			nodes[c.NodeID] = true
		}
	}
	return nodes
}

// nodeCaps is the node capabilities node's own instance of the plugin
// advertises (none when it runs no node plugin). A node call is decided by
// the node it goes to: the plugin summary's node capabilities come from
// whichever node instance sorts first, and a node with a client
// certificate could make them say anything (issue 38).
func nodeCaps(plug *structs.Plugin, node string) structs.CSINodeCapabilities {
	if info := plug.Nodes[node]; info != nil && info.NodeCapabilities != nil {
		return *info.NodeCapabilities
	}
	return structs.CSINodeCapabilities{}
}

// nodesCanExpand: a node the volume is on advertises EXPAND_VOLUME itself;
// with no such node, what the plugin's summary says (the next claim's node
// is checked when it comes).
func nodesCanExpand(plug *structs.Plugin, vol *structs.Volume) bool {
	nodes := claimNodes(vol)
	if len(nodes) == 0 {
		return plug.NodeCapabilities != nil && plug.NodeCapabilities.ExpandVolume
	}
	for id := range nodes {
		if nodeCaps(plug, id).ExpandVolume {
			return true
		}
	}
	return false
}
