package csi

import (
	"context"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// ControllerExpandRequest grows a volume on the storage side.
type ControllerExpandRequest struct {
	VolumeID    string // the plugin's volume ID (claimd's external ID)
	Capacity    int64  // required_bytes
	CapacityMax int64  // limit_bytes; 0 leaves it to the plugin
	Capability  *VolumeCapability
	Secrets     structs.Secrets
}

// ControllerExpandVolume runs ControllerExpandVolume and returns the size
// the plugin reports and whether nodes must expand their view too.
func (c *Client) ControllerExpandVolume(ctx context.Context, req *ControllerExpandRequest) (int64, bool, error) {
	pb := &csipb.ControllerExpandVolumeRequest{
		VolumeId:      req.VolumeID,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: req.Capacity, LimitBytes: req.CapacityMax},
		Secrets:       req.Secrets,
	}
	if req.Capability != nil {
		vc, err := req.Capability.ToCSI()
		if err != nil {
			return 0, false, err
		}
		pb.VolumeCapability = vc
	}
	resp, err := invoke(ctx, c, "ControllerExpandVolume", pb, c.controller.ControllerExpandVolume)
	if err != nil {
		return 0, false, err
	}
	return resp.GetCapacityBytes(), resp.GetNodeExpansionRequired(), nil
}

// NodeExpandRequest grows a node's view of a staged or published volume.
type NodeExpandRequest struct {
	VolumeID    string // the plugin's volume ID
	VolumePath  string // where the volume is published (or staged)
	StagingPath string // the staging path, when the plugin stages
	Capacity    int64
	CapacityMax int64
	Capability  VolumeCapability
}

// NodeExpandVolume runs NodeExpandVolume and returns the size the plugin
// reports (0 when it does not say).
func (c *Client) NodeExpandVolume(ctx context.Context, req *NodeExpandRequest) (int64, error) {
	vc, err := req.Capability.ToCSI()
	if err != nil {
		return 0, err
	}
	resp, err := invoke(ctx, c, "NodeExpandVolume", &csipb.NodeExpandVolumeRequest{
		VolumeId: req.VolumeID, VolumePath: req.VolumePath, StagingTargetPath: req.StagingPath,
		CapacityRange:    &csipb.CapacityRange{RequiredBytes: req.Capacity, LimitBytes: req.CapacityMax},
		VolumeCapability: vc,
	}, c.node.NodeExpandVolume)
	if err != nil {
		return 0, err
	}
	return resp.GetCapacityBytes(), nil
}
