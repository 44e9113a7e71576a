package endpoints

import (
	"errors"

	"github.com/claimd/claimd/structs"
)

// Usage asks every node that holds a live claim on the volume for its
// usage now (NodeGetVolumeStats at the mount), through the nodes' sessions;
// nothing is recorded. A node that cannot tell is an entry with its error,
// not a failed call: the others still answer.
func (v *Volume) Usage(args *structs.VolumeUsageRequest, reply *structs.VolumeUsageResponse) error {
	_, done, err := v.auth.gate("Volume.Usage", args, reply, nil)
	if done {
		return err
	}
	vol, err := v.registered(args.VolumeID)
	if err != nil {
		return err
	}
	plug, err := v.plugin(vol.PluginID)
	if err != nil && !errors.Is(err, structs.ErrNotFound) {
		return err
	}
	for _, c := range vol.AllClaims() {
		if c.State != structs.ClaimStateTaken {
			continue
		}
		u := &structs.VolumeUsage{NodeID: c.NodeID, AllocID: c.AllocID}
		// The claim's node decides, not the plugin summary (one node's
		// word: see nodeCaps).
		if plug == nil || !nodeCaps(plug, c.NodeID).GetVolumeStats {
			u.Error = "plugin " + vol.PluginID + " on node " + c.NodeID + " does not advertise GET_VOLUME_STATS"
			reply.Usage = append(reply.Usage, u)
			continue
		}
		req := &structs.ClientCSINodeStatsRequest{NodeID: c.NodeID, PluginID: vol.PluginID, VolumeID: vol.ID,
			ExternalID: vol.ExternalID, AllocID: c.AllocID}
		var out structs.ClientCSINodeStatsResponse
		if err := csiOf(v.srv).NodeVolumeStats(req, &out); err != nil {
			u.Error = err.Error()
		} else {
			*u = out.Usage
		}
		reply.Usage = append(reply.Usage, u)
	}
	reply.Index = vol.ModifyIndex
	return nil
}

// NodeVolumeStats asks a claim's node for a volume's usage.
func (c *ClientCSI) NodeVolumeStats(args *structs.ClientCSINodeStatsRequest, reply *structs.ClientCSINodeStatsResponse) error {
	if _, err := c.auth.check("ClientCSI.NodeVolumeStats", args); err != nil {
		return err
	}
	return csiOf(c.srv).NodeVolumeStats(args, reply)
}

func (c csiCalls) NodeVolumeStats(args *structs.ClientCSINodeStatsRequest, reply *structs.ClientCSINodeStatsResponse) error {
	return c.m.NodeStats(args, reply)
}

// NodeHeldVolume asks a node which allocations have a volume mounted
// there (forwarded to the server holding the node's session).
func (c *ClientCSI) NodeHeldVolume(args *structs.ClientCSINodeHeldRequest, reply *structs.ClientCSINodeHeldResponse) error {
	if _, err := c.auth.check("ClientCSI.NodeHeldVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).NodeHeldVolume(args, reply)
}

func (c csiCalls) NodeHeldVolume(args *structs.ClientCSINodeHeldRequest, reply *structs.ClientCSINodeHeldResponse) error {
	return c.m.NodeHeld(args, reply)
}
