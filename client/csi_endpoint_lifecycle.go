package client

import (
	"fmt"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/structs"
)

// The controller and node calls of a volume's later life: snapshots and
// expansion. Servers decide whether a call is allowed (capabilities,
// known volume); this side only runs it on the local plugin.

// ControllerCreateSnapshot runs CreateSnapshot on this node's controller
// plugin. The name makes a repeat find the same snapshot.
func (e *csiEndpoint) ControllerCreateSnapshot(args *structs.ClientCSIControllerSnapshotRequest, reply *structs.ClientCSIControllerSnapshotResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	s, err := c.CreateSnapshot(ctx, args.Name, args.SourceExternalID, args.Parameters, args.Secrets)
	if err != nil {
		return pluginError(err)
	}
	reply.Snapshot = toSnapshot(args.PluginID, s)
	reply.ControllerNodeID = e.a.ident.ID
	e.a.logger.Info("controller created snapshot", "name", args.Name, "snapshot", s.ID, "source", args.SourceExternalID)
	return nil
}

// ControllerDeleteSnapshot runs DeleteSnapshot on this node's controller
// plugin.
func (e *csiEndpoint) ControllerDeleteSnapshot(args *structs.ClientCSIControllerSnapshotDeleteRequest, reply *structs.ClientCSIControllerSnapshotDeleteResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	if err := c.DeleteSnapshot(ctx, args.SnapshotID); err != nil {
		return pluginError(err)
	}
	reply.ControllerNodeID = e.a.ident.ID
	e.a.logger.Info("controller deleted snapshot", "snapshot", args.SnapshotID)
	return nil
}

// ControllerListSnapshots runs ListSnapshots (every page, bounded) on this
// node's controller plugin.
func (e *csiEndpoint) ControllerListSnapshots(args *structs.ClientCSIControllerSnapshotListRequest, reply *structs.ClientCSIControllerSnapshotListResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	snaps, truncated, err := c.ListSnapshots(ctx)
	if err != nil {
		return pluginError(err)
	}
	if truncated {
		e.a.logger.Warn("plugin lists more snapshots than are collected; the list is cut", "plugin", args.PluginID,
			"max", csi.MaxListedSnapshots)
	}
	for _, s := range snaps {
		reply.Snapshots = append(reply.Snapshots, toSnapshot(args.PluginID, s))
	}
	reply.ControllerNodeID = e.a.ident.ID
	return nil
}

func toSnapshot(pluginID string, s *csi.SnapshotInfo) *structs.Snapshot {
	return &structs.Snapshot{PluginID: pluginID, ID: s.ID, SourceExternalID: s.SourceExternalID,
		SizeBytes: s.SizeBytes, CreateTime: s.CreateTime, ReadyToUse: s.ReadyToUse}
}

// ControllerExpandVolume runs ControllerExpandVolume on this node's
// controller plugin.
func (e *csiEndpoint) ControllerExpandVolume(args *structs.ClientCSIControllerExpandRequest, reply *structs.ClientCSIControllerExpandResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	capacity, nodeRequired, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandRequest{
		VolumeID: args.ExternalID, Capacity: args.Capacity, CapacityMax: args.CapacityMax, Secrets: args.Secrets,
		Capability: &csi.VolumeCapability{AccessMode: args.AccessMode, AttachmentMode: args.AttachmentMode, MountOptions: args.MountOptions},
	})
	if err != nil {
		return pluginError(err)
	}
	reply.Capacity, reply.NodeExpansionRequired = capacity, nodeRequired
	reply.ControllerNodeID = e.a.ident.ID
	e.a.logger.Info("controller expanded volume", "volume", args.VolumeID, "external_id", args.ExternalID,
		"capacity", capacity, "node_expansion_required", nodeRequired)
	return nil
}

// NodeExpandVolume grows this node's view of a volume wherever an
// allocation here has it staged or published.
func (e *csiEndpoint) NodeExpandVolume(args *structs.ClientCSINodeExpandRequest, reply *structs.ClientCSINodeExpandResponse) error {
	mm, err := e.nodePlugin(args.NodeID, args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	paths, capacity, err := mm.ExpandVolume(ctx, args.VolumeID, args.ExternalID, args.Capacity, args.CapacityMax)
	if err != nil {
		return pluginError(err)
	}
	reply.Paths, reply.Capacity = paths, capacity
	return nil
}

// ControllerListVolumes asks this node's controller plugin what the
// storage holds, for reconciliation: every volume, or one.
func (e *csiEndpoint) ControllerListVolumes(args *structs.ClientCSIControllerListVolumesRequest, reply *structs.ClientCSIControllerListVolumesResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	caps, err := c.ControllerGetCapabilities(ctx)
	if err != nil {
		return pluginError(err)
	}
	if args.ExternalID != "" {
		if !caps.GetVolume {
			return structs.Invalid("plugin_id", fmt.Sprintf("controller plugin %q does not offer GET_VOLUME", args.PluginID))
		}
		v, err := c.ControllerGetVolume(ctx, args.ExternalID)
		if err != nil {
			return pluginError(err)
		}
		reply.Volumes = []*structs.StorageVolume{v}
	} else {
		if !caps.ListVolumes {
			return structs.Invalid("plugin_id", fmt.Sprintf("controller plugin %q does not offer LIST_VOLUMES", args.PluginID))
		}
		vols, err := c.ListVolumes(ctx)
		if err != nil {
			return pluginError(err)
		}
		reply.Volumes = vols
	}
	reply.PublishedNodes = caps.ListPublishedNodes
	switch {
	case args.ExternalID != "" && caps.VolumeHealth:
		if h, err := c.ControllerGetVolumeHealth(ctx, args.ExternalID); err == nil && len(h) > 0 {
			reply.Health = map[string][]string{args.ExternalID: h}
		}
	case args.ExternalID == "" && caps.ListVolumeHealth:
		// Health is an extra: a plugin that fails it still answers the
		// listing, which is what reconciliation needs first.
		if h, err := c.ListVolumeHealth(ctx); err == nil {
			reply.Health = h
		} else {
			e.a.logger.Warn("listing volume health failed", "plugin", args.PluginID, "error", err)
		}
	}
	reply.ControllerNodeID = e.a.ident.ID
	return nil
}

// ControllerModifyVolume runs ControllerModifyVolume on this node's
// controller plugin.
func (e *csiEndpoint) ControllerModifyVolume(args *structs.ClientCSIControllerModifyRequest, reply *structs.ClientCSIControllerModifyResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	if err := c.ControllerModifyVolume(ctx, args.ExternalID, args.MutableParameters, args.Secrets); err != nil {
		return pluginError(err)
	}
	reply.ControllerNodeID = e.a.ident.ID
	e.a.logger.Info("controller modified volume", "volume", args.VolumeID, "parameters", structs.SortedKeys(args.MutableParameters))
	return nil
}
