package csi

import (
	"context"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// NodeInfo is what NodeGetInfo reports.
type NodeInfo struct {
	// NodeID is the plugin's name for this node: the node_id controller
	// calls for this node must carry.
	NodeID string
	// MaxVolumes is how many volumes the plugin can publish on this node;
	// 0 means no limit.
	MaxVolumes         int64
	AccessibleTopology map[string]string
}

// NodeCapabilities is what NodeGetCapabilities reports, reduced to what
// claimd uses.
type NodeCapabilities struct {
	// StageUnstageVolume: the plugin needs NodeStageVolume before
	// NodePublishVolume.
	StageUnstageVolume bool
	GetVolumeStats     bool
	ExpandVolume       bool
	// VolumeHealth: NodeGetVolumeHealth answers.
	VolumeHealth bool
	// SingleNodeMultiWriter: the single-node-single-writer and
	// single-node-multi-writer access modes are understood.
	SingleNodeMultiWriter bool
}

// NodeGetInfo asks the node plugin who it is.
func (c *Client) NodeGetInfo(ctx context.Context) (*NodeInfo, error) {
	resp, err := invoke(ctx, c, "NodeGetInfo", &csipb.NodeGetInfoRequest{}, c.node.NodeGetInfo)
	if err != nil {
		return nil, err
	}
	return &NodeInfo{
		NodeID:             resp.GetNodeId(),
		MaxVolumes:         resp.GetMaxVolumesPerNode(),
		AccessibleTopology: resp.GetAccessibleTopology().GetSegments(),
	}, nil
}

// NodeGetCapabilities asks which node RPCs the plugin serves.
func (c *Client) NodeGetCapabilities(ctx context.Context) (*NodeCapabilities, error) {
	resp, err := invoke(ctx, c, "NodeGetCapabilities", &csipb.NodeGetCapabilitiesRequest{}, c.node.NodeGetCapabilities)
	if err != nil {
		return nil, err
	}
	out := &NodeCapabilities{}
	for _, nc := range resp.GetCapabilities() {
		switch nc.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			out.StageUnstageVolume = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			out.GetVolumeStats = true
		case csipb.NodeServiceCapability_RPC_EXPAND_VOLUME:
			out.ExpandVolume = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH:
			out.VolumeHealth = true
		case csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
			out.SingleNodeMultiWriter = true
		}
	}
	return out, nil
}

// NodeStageRequest stages a volume at a node-wide path.
type NodeStageRequest struct {
	VolumeID       string // the plugin's volume ID (claimd's external ID)
	StagingPath    string
	Capability     VolumeCapability
	PublishContext map[string]string
	VolumeContext  map[string]string
	Secrets        structs.Secrets
}

// NodeStageVolume stages a volume on this node.
func (c *Client) NodeStageVolume(ctx context.Context, req *NodeStageRequest) error {
	vc, err := req.Capability.ToCSI()
	if err != nil {
		return err
	}
	_, err = invoke(ctx, c, "NodeStageVolume", &csipb.NodeStageVolumeRequest{
		VolumeId:          req.VolumeID,
		StagingTargetPath: req.StagingPath,
		VolumeCapability:  vc,
		PublishContext:    req.PublishContext,
		VolumeContext:     req.VolumeContext,
		Secrets:           req.Secrets,
	}, c.node.NodeStageVolume)
	return err
}

// NodeUnstageVolume undoes NodeStageVolume. Nothing staged counts as done
// (see alreadyDetached).
func (c *Client) NodeUnstageVolume(ctx context.Context, volumeID, stagingPath string) error {
	_, err := invoke(ctx, c, "NodeUnstageVolume", &csipb.NodeUnstageVolumeRequest{
		VolumeId:          volumeID,
		StagingTargetPath: stagingPath,
	}, c.node.NodeUnstageVolume)
	if err != nil && alreadyDetached(err, true) {
		c.logger.Debug("node unstage found nothing to detach", "volume", volumeID, "path", stagingPath, "error", err)
		return nil
	}
	return err
}

// NodePublishRequest publishes a volume at an allocation's target path.
type NodePublishRequest struct {
	VolumeID       string // the plugin's volume ID (claimd's external ID)
	StagingPath    string // empty when the plugin does not stage
	TargetPath     string
	Capability     VolumeCapability
	ReadOnly       bool
	PublishContext map[string]string
	VolumeContext  map[string]string
	Secrets        structs.Secrets
}

// NodePublishVolume publishes a volume for one allocation.
func (c *Client) NodePublishVolume(ctx context.Context, req *NodePublishRequest) error {
	vc, err := req.Capability.ToCSI()
	if err != nil {
		return err
	}
	_, err = invoke(ctx, c, "NodePublishVolume", &csipb.NodePublishVolumeRequest{
		VolumeId:          req.VolumeID,
		StagingTargetPath: req.StagingPath,
		TargetPath:        req.TargetPath,
		VolumeCapability:  vc,
		Readonly:          req.ReadOnly,
		PublishContext:    req.PublishContext,
		VolumeContext:     req.VolumeContext,
		Secrets:           req.Secrets,
	}, c.node.NodePublishVolume)
	return err
}

// NodeUnpublishVolume undoes NodePublishVolume. Nothing mounted counts as
// done (see alreadyDetached).
func (c *Client) NodeUnpublishVolume(ctx context.Context, volumeID, targetPath string) error {
	_, err := invoke(ctx, c, "NodeUnpublishVolume", &csipb.NodeUnpublishVolumeRequest{
		VolumeId:   volumeID,
		TargetPath: targetPath,
	}, c.node.NodeUnpublishVolume)
	if err != nil && alreadyDetached(err, true) {
		c.logger.Debug("node unpublish found nothing to detach", "volume", volumeID, "path", targetPath, "error", err)
		return nil
	}
	return err
}

// VolumeStats is what NodeGetVolumeStats reports, reduced to bytes and
// inodes.
type VolumeStats struct {
	BytesTotal, BytesUsed, BytesAvailable int64
	InodesTotal, InodesUsed               int64
}

// NodeGetVolumeStats asks the node plugin for a volume's usage at path.
func (c *Client) NodeGetVolumeStats(ctx context.Context, volumeID, path string) (*VolumeStats, error) {
	resp, err := invoke(ctx, c, "NodeGetVolumeStats", &csipb.NodeGetVolumeStatsRequest{VolumeId: volumeID, VolumePath: path}, c.node.NodeGetVolumeStats)
	if err != nil {
		return nil, err
	}
	out := &VolumeStats{}
	for _, u := range resp.GetUsage() {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			out.BytesTotal, out.BytesUsed, out.BytesAvailable = u.GetTotal(), u.GetUsed(), u.GetAvailable()
		case csipb.VolumeUsage_INODES:
			out.InodesTotal, out.InodesUsed = u.GetTotal(), u.GetUsed()
		}
	}
	return out, nil
}
