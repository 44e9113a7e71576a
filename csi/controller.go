package csi

import (
	"context"
	"strings"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// ControllerCapabilities is what ControllerGetCapabilities reports, reduced
// to what claimd uses.
type ControllerCapabilities struct {
	// PublishUnpublishVolume: the plugin needs ControllerPublishVolume before
	// a node can stage the volume.
	PublishUnpublishVolume bool
	// PublishReadOnly: ControllerPublishVolume honours the readonly field.
	PublishReadOnly      bool
	CreateDeleteVolume   bool
	CreateDeleteSnapshot bool
	ListSnapshots        bool
	ExpandVolume         bool
	ListVolumes          bool
	GetCapacity          bool
	CloneVolume          bool
	ListPublishedNodes   bool
	GetVolume            bool
	VolumeHealth         bool
	ListVolumeHealth     bool
	ModifyVolume         bool
}

// ControllerGetCapabilities asks which controller RPCs the plugin serves.
func (c *Client) ControllerGetCapabilities(ctx context.Context) (*ControllerCapabilities, error) {
	resp, err := invoke(ctx, c, "ControllerGetCapabilities", &csipb.ControllerGetCapabilitiesRequest{}, c.controller.ControllerGetCapabilities)
	if err != nil {
		return nil, err
	}
	out := &ControllerCapabilities{}
	for _, cc := range resp.GetCapabilities() {
		switch cc.GetRpc().GetType() {
		case csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME:
			out.PublishUnpublishVolume = true
		case csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY:
			out.PublishReadOnly = true
		case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME:
			out.CreateDeleteVolume = true
		case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT:
			out.CreateDeleteSnapshot = true
		case csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS:
			out.ListSnapshots = true
		case csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME:
			out.ExpandVolume = true
		case csipb.ControllerServiceCapability_RPC_LIST_VOLUMES:
			out.ListVolumes = true
		case csipb.ControllerServiceCapability_RPC_GET_CAPACITY:
			out.GetCapacity = true
		case csipb.ControllerServiceCapability_RPC_CLONE_VOLUME:
			out.CloneVolume = true
		case csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES:
			out.ListPublishedNodes = true
		case csipb.ControllerServiceCapability_RPC_GET_VOLUME:
			out.GetVolume = true
		case csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH:
			out.VolumeHealth = true
		case csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH:
			out.ListVolumeHealth = true
		case csipb.ControllerServiceCapability_RPC_MODIFY_VOLUME:
			out.ModifyVolume = true
		}
	}
	return out, nil
}

// ControllerPublishRequest attaches a volume to a node.
type ControllerPublishRequest struct {
	// VolumeID is the plugin's ID of the volume (claimd's external ID).
	VolumeID string
	// NodeID is the node plugin's ID of the target node (its NodeGetInfo
	// node_id, claimd's external node ID).
	NodeID        string
	Capability    VolumeCapability
	ReadOnly      bool
	Secrets       structs.Secrets
	VolumeContext map[string]string
}

// ControllerPublishVolume attaches a volume to a node and returns the publish
// context that node staging and publishing must be given.
func (c *Client) ControllerPublishVolume(ctx context.Context, req *ControllerPublishRequest) (map[string]string, error) {
	vc, err := req.Capability.ToCSI()
	if err != nil {
		return nil, err
	}
	resp, err := invoke(ctx, c, "ControllerPublishVolume", &csipb.ControllerPublishVolumeRequest{
		VolumeId:         req.VolumeID,
		NodeId:           req.NodeID,
		VolumeCapability: vc,
		Readonly:         req.ReadOnly,
		Secrets:          req.Secrets,
		VolumeContext:    req.VolumeContext,
	}, c.controller.ControllerPublishVolume)
	if err != nil {
		return nil, err
	}
	return resp.GetPublishContext(), nil
}

// ControllerUnpublishVolume detaches a volume from a node. A volume or node
// the plugin does not know counts as detached (see alreadyDetached).
func (c *Client) ControllerUnpublishVolume(ctx context.Context, volumeID, nodeID string, secrets structs.Secrets) error {
	_, err := invoke(ctx, c, "ControllerUnpublishVolume", &csipb.ControllerUnpublishVolumeRequest{
		VolumeId: volumeID,
		NodeId:   nodeID,
		Secrets:  secrets,
	}, c.controller.ControllerUnpublishVolume)
	if err != nil && alreadyDetached(err, false) {
		c.logger.Debug("controller unpublish found nothing to detach", "volume", volumeID, "node", nodeID, "error", err)
		return nil
	}
	return err
}

// ValidateRequest asks whether a volume supports capabilities.
type ValidateRequest struct {
	VolumeID      string
	Capabilities  []VolumeCapability
	VolumeContext map[string]string
	Parameters    map[string]string
	Secrets       structs.Secrets
}

// ControllerValidateVolumeCapabilities returns nil when the plugin confirms
// every capability, and an invalid error carrying the plugin's message when
// it does not.
func (c *Client) ControllerValidateVolumeCapabilities(ctx context.Context, req *ValidateRequest) error {
	caps := make([]*csipb.VolumeCapability, 0, len(req.Capabilities))
	for _, vc := range req.Capabilities {
		pb, err := vc.ToCSI()
		if err != nil {
			return err
		}
		caps = append(caps, pb)
	}
	resp, err := invoke(ctx, c, "ValidateVolumeCapabilities", &csipb.ValidateVolumeCapabilitiesRequest{
		VolumeId:           req.VolumeID,
		VolumeCapabilities: caps,
		VolumeContext:      req.VolumeContext,
		Parameters:         req.Parameters,
		Secrets:            req.Secrets,
	}, c.controller.ValidateVolumeCapabilities)
	if err != nil {
		return err
	}
	if resp.GetConfirmed() == nil {
		msg := strings.TrimSpace(resp.GetMessage())
		if msg == "" {
			msg = "plugin did not confirm the capabilities"
		}
		return structs.NewError(structs.CodeInvalid, "volume "+req.VolumeID+": "+msg)
	}
	return nil
}
