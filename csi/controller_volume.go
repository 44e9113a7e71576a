package csi

import (
	"context"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// CreateVolumeRequest asks a controller plugin for a new volume. Name makes
// the call idempotent: the plugin answers a repeated name with the volume
// it made the first time.
type CreateVolumeRequest struct {
	Name         string
	CapacityMin  int64
	CapacityMax  int64
	Capabilities []VolumeCapability
	Parameters   map[string]string
	Secrets      structs.Secrets
	Topology     *structs.VolumeTopologyRequest
	SnapshotID   string
	CloneID      string
}

// CreatedVolume is the plugin's answer.
type CreatedVolume struct {
	ExternalID         string
	Capacity           int64
	Context            map[string]string
	AccessibleTopology []map[string]string
}

// CreateVolume runs CreateVolume.
func (c *Client) CreateVolume(ctx context.Context, req *CreateVolumeRequest) (*CreatedVolume, error) {
	caps := make([]*csipb.VolumeCapability, 0, len(req.Capabilities))
	for _, vc := range req.Capabilities {
		pb, err := vc.ToCSI()
		if err != nil {
			return nil, err
		}
		caps = append(caps, pb)
	}
	pbReq := &csipb.CreateVolumeRequest{
		Name:               req.Name,
		VolumeCapabilities: caps,
		Parameters:         req.Parameters,
		Secrets:            req.Secrets,
	}
	if req.CapacityMin > 0 || req.CapacityMax > 0 {
		pbReq.CapacityRange = &csipb.CapacityRange{RequiredBytes: req.CapacityMin, LimitBytes: req.CapacityMax}
	}
	switch {
	case req.SnapshotID != "":
		pbReq.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: req.SnapshotID}}}
	case req.CloneID != "":
		pbReq.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
			Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: req.CloneID}}}
	}
	if t := req.Topology; t != nil && (len(t.Required) > 0 || len(t.Preferred) > 0) {
		pbReq.AccessibilityRequirements = &csipb.TopologyRequirement{
			Requisite: toTopologies(t.Required), Preferred: toTopologies(t.Preferred)}
	}
	resp, err := invoke(ctx, c, "CreateVolume", pbReq, c.controller.CreateVolume)
	if err != nil {
		return nil, err
	}
	v := resp.GetVolume()
	if v.GetVolumeId() == "" {
		return nil, structs.NewError(structs.CodeUnavailable, "plugin answered CreateVolume without a volume_id")
	}
	out := &CreatedVolume{ExternalID: v.GetVolumeId(), Capacity: v.GetCapacityBytes(), Context: v.GetVolumeContext()}
	for _, t := range v.GetAccessibleTopology() {
		if len(t.GetSegments()) > 0 {
			out.AccessibleTopology = append(out.AccessibleTopology, t.GetSegments())
		}
	}
	return out, nil
}

// DeleteVolume runs DeleteVolume. CSI makes a volume the plugin does not
// know a success, so a retry after a lost answer is one too.
func (c *Client) DeleteVolume(ctx context.Context, externalID string, secrets structs.Secrets) error {
	_, err := invoke(ctx, c, "DeleteVolume", &csipb.DeleteVolumeRequest{VolumeId: externalID, Secrets: secrets},
		c.controller.DeleteVolume)
	return err
}

func toTopologies(segs []map[string]string) []*csipb.Topology {
	if len(segs) == 0 {
		return nil
	}
	out := make([]*csipb.Topology, 0, len(segs))
	for _, s := range segs {
		out = append(out, &csipb.Topology{Segments: s})
	}
	return out
}

// ControllerModifyVolume changes a volume's mutable parameters (CSI
// MODIFY_VOLUME).
func (c *Client) ControllerModifyVolume(ctx context.Context, externalID string, params map[string]string, secrets structs.Secrets) error {
	_, err := invoke(ctx, c, "ControllerModifyVolume", &csipb.ControllerModifyVolumeRequest{
		VolumeId: externalID, MutableParameters: params, Secrets: secrets}, c.controller.ControllerModifyVolume)
	return err
}
