package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/structs"
)

// csiEndpoint answers the CSI calls servers send down this agent's session.
type csiEndpoint struct{ a *Agent }

// callTimeout bounds one plugin operation started by a server; the server
// side waits a little longer (forward.NodeCallTimeout).
const callTimeout = 90 * time.Second

// callContext bounds one plugin operation a server started by the budget
// the call brought (what was left of the leader's storage lease when it
// was sent, decision 46), at most callTimeout: a deposed leader's call
// that arrives late ends with its lease, at the plugin too (gRPC passes
// the deadline on).
func (e *csiEndpoint) callContext(r *structs.NodeRouting) (context.Context, context.CancelFunc) {
	budget := callTimeout
	if r.Budget > 0 {
		budget = min(budget, r.Budget)
	}
	return context.WithTimeout(e.a.ctx, budget)
}

// NodeDetachVolume unpublishes an allocation's volume and unstages it when
// no other allocation here uses it. "Not mounted" counts as done (seed 6).
func (e *csiEndpoint) NodeDetachVolume(args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	mm, err := e.nodePlugin(args.NodeID, args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	usage := csi.UsageOptions{ReadOnly: args.ReadOnly, AccessMode: args.AccessMode, AttachmentMode: args.AttachmentMode}
	// The workload (claimd exec) stops first: a writer holding the mount
	// would make the unmount fail.
	e.a.leaseFile.markStopping(args.AllocID, args.VolumeID)
	if err := mm.UnmountVolume(ctx, args.VolumeID, args.ExternalID, args.AllocID, usage); err != nil {
		return pluginError(err)
	}
	if err := e.a.held.remove(args.AllocID, args.VolumeID); err != nil {
		e.a.logger.Warn("could not update the held-claims record", "error", err)
	}
	e.a.logger.Info("node detached volume", "volume", args.VolumeID, "alloc", args.AllocID)
	return nil
}

// nodePlugin checks that a node call is meant for this node and that its
// node plugin is healthy, and returns the plugin's mount manager.
func (e *csiEndpoint) nodePlugin(nodeID, pluginID string) (*csi.MountManager, error) {
	if nodeID != e.a.ident.ID {
		return nil, structs.Invalid("node_id", fmt.Sprintf("%q is not this node (%q)", nodeID, e.a.ident.ID))
	}
	if err := e.requireHealthy(pluginID, true); err != nil {
		return nil, err
	}
	return e.a.mountManager(pluginID)
}

// ControllerAttachVolume runs ControllerPublishVolume on this node's
// controller plugin.
func (e *csiEndpoint) ControllerAttachVolume(args *structs.ClientCSIControllerAttachRequest, reply *structs.ClientCSIControllerAttachResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	pctx, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishRequest{
		VolumeID: args.ExternalID, NodeID: args.ExternalNodeID,
		Capability: csi.VolumeCapability{AccessMode: args.AccessMode, AttachmentMode: args.AttachmentMode, MountOptions: args.MountOptions},
		ReadOnly:   args.ReadOnly, Secrets: args.Secrets, VolumeContext: args.VolumeContext,
	})
	if err != nil {
		return pluginError(err)
	}
	reply.PublishContext = pctx
	reply.ControllerNodeID = e.a.ident.ID
	return nil
}

// ControllerDetachVolume runs ControllerUnpublishVolume on this node's
// controller plugin.
func (e *csiEndpoint) ControllerDetachVolume(args *structs.ClientCSIControllerDetachRequest, reply *structs.ClientCSIControllerDetachResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	if err := c.ControllerUnpublishVolume(ctx, args.ExternalID, args.ExternalNodeID, args.Secrets); err != nil {
		return pluginError(err)
	}
	reply.ControllerNodeID = e.a.ident.ID
	return nil
}

func (e *csiEndpoint) controller(pluginID string) (*csi.Client, error) {
	if err := e.requireHealthy(pluginID, false); err != nil {
		return nil, err
	}
	c, ok := e.a.plugins.Client(pluginID)
	if !ok {
		return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("controller plugin %q is not configured on this node", pluginID))
	}
	return c, nil
}

// requireHealthy refuses calls to a plugin this node does not run in the
// needed role. Unhealthy plugins are still tried: the probe may lag, and a
// failed call costs no more than a refusal.
func (e *csiEndpoint) requireHealthy(pluginID string, node bool) error {
	for _, fp := range e.a.plugins.Fingerprints() {
		if fp.ID != pluginID {
			continue
		}
		if node && !fp.Type.HasNode() || !node && !fp.Type.HasController() {
			break
		}
		return nil
	}
	role := "controller"
	if node {
		role = "node"
	}
	return structs.Invalid("plugin_id", fmt.Sprintf("this node (%s) does not run plugin %q as a %s plugin", e.a.ident.ID, pluginID, role))
}

// pluginError keeps the code of whatever the plugin or mount manager said,
// with the whole message, so that it survives the RPC back to the server;
// anything uncoded is unavailable, which the servers retry with backoff.
func pluginError(err error) error {
	if _, ok := err.(*structs.CodedError); ok {
		return err
	}
	var ce *structs.CodedError
	var coder interface{ ClaimdCode() structs.ErrorCode }
	if errors.As(err, &ce) || errors.As(err, &coder) {
		return structs.Wrap(err, "plugin call")
	}
	return structs.NewError(structs.CodeUnavailable, err.Error())
}

// ControllerCreateVolume runs CreateVolume on this node's controller
// plugin. The name is claimd's volume ID, so a repeat finds the same volume.
func (e *csiEndpoint) ControllerCreateVolume(args *structs.ClientCSIControllerCreateRequest, reply *structs.ClientCSIControllerCreateResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	caps := make([]csi.VolumeCapability, 0, len(args.Capabilities))
	for _, vc := range args.Capabilities {
		caps = append(caps, csi.VolumeCapability{AccessMode: vc.AccessMode, AttachmentMode: vc.AttachmentMode, MountOptions: args.MountOptions})
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: args.Name, CapacityMin: args.CapacityMin, CapacityMax: args.CapacityMax, Capabilities: caps,
		Parameters: args.Parameters, Secrets: args.Secrets, Topology: args.Topology,
		SnapshotID: args.SnapshotID, CloneID: args.CloneID,
	})
	if err != nil {
		return pluginError(err)
	}
	reply.ExternalID, reply.Capacity = vol.ExternalID, vol.Capacity
	reply.Context, reply.AccessibleTopology = vol.Context, vol.AccessibleTopology
	reply.ControllerNodeID = e.a.ident.ID
	e.a.logger.Info("controller created volume", "name", args.Name, "external_id", vol.ExternalID, "capacity", vol.Capacity)
	return nil
}

// ControllerDeleteVolume runs DeleteVolume on this node's controller
// plugin.
func (e *csiEndpoint) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteRequest, reply *structs.ClientCSIControllerDeleteResponse) error {
	c, err := e.controller(args.PluginID)
	if err != nil {
		return err
	}
	ctx, cancel := e.callContext(&args.NodeRouting)
	defer cancel()
	if err := c.DeleteVolume(ctx, args.ExternalID, args.Secrets); err != nil {
		return pluginError(err)
	}
	reply.ControllerNodeID = e.a.ident.ID
	e.a.logger.Info("controller deleted volume", "volume", args.VolumeID, "external_id", args.ExternalID)
	return nil
}

// NodeVolumeStats answers a volume's usage where this node mounted it for
// an allocation (NodeGetVolumeStats at the mount path).
func (e *csiEndpoint) NodeVolumeStats(args *structs.ClientCSINodeStatsRequest, reply *structs.ClientCSINodeStatsResponse) error {
	if args.NodeID != e.a.ident.ID {
		return structs.Invalid("node_id", fmt.Sprintf("%q is not this node (%q)", args.NodeID, e.a.ident.ID))
	}
	if err := e.requireHealthy(args.PluginID, true); err != nil {
		return err
	}
	path := e.a.held.mountPath(args.AllocID, args.VolumeID)
	if path == "" {
		return structs.NewError(structs.CodeNotFound, fmt.Sprintf("volume %q is not mounted here for alloc %q", args.VolumeID, args.AllocID))
	}
	st, err := e.a.volumeStats(args.PluginID, args.ExternalID, path)
	if err != nil {
		return err
	}
	reply.Usage = structs.VolumeUsage{NodeID: e.a.ident.ID, AllocID: args.AllocID, BytesTotal: st.BytesTotal, BytesUsed: st.BytesUsed,
		BytesAvailable: st.BytesAvailable, InodesTotal: st.InodesTotal, InodesUsed: st.InodesUsed}
	return nil
}
