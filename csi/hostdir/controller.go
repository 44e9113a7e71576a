package hostdir

import (
	"context"
	"slices"
	"strconv"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Publish context keys hostdir returns from ControllerPublishVolume.
const (
	PublishContextNode     = "hostdir.claimd.io/node"
	PublishContextReadOnly = "hostdir.claimd.io/readonly"
)

type controllerServer struct {
	csipb.UnimplementedControllerServer
	p *Plugin
}

func (s *controllerServer) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	resp := &csipb.ControllerGetCapabilitiesResponse{}
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csipb.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		// Published nodes come from the attachment records, which is what
		// lets a CO compare its record with the storage's (issue 27).
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME,
		csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csipb.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	} {
		resp.Capabilities = append(resp.Capabilities, &csipb.ControllerServiceCapability{
			Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

// ControllerPublishVolume records that the volume is attached to a node. The
// record is persisted, so a restarted plugin still refuses a second node for
// a single-node volume (FailedPrecondition), and the same attach repeated is
// a success while a different one to the same node is AlreadyExists.
func (s *controllerServer) ControllerPublishVolume(_ context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := required("volume_id", id, "node_id", node); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if err := requireCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	p := s.p
	if ok, err := p.store.volumeExists(id); err != nil {
		return nil, internal("look up volume", err)
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	nodeRec, err := p.store.readNode(node)
	if err != nil {
		return nil, internal("look up node", err)
	} else if nodeRec == nil {
		return nil, status.Errorf(codes.NotFound, "node %s not found: no hostdir node plugin has registered it under %s", node, p.cfg.Root)
	}
	if meta, err := p.store.readMeta(id); err != nil {
		return nil, internal("read volume metadata", err)
	} else if meta != nil && !reachableFrom(meta.Topology, nodeRec.Topology) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is accessible from %v, and node %s is at %v", id, meta.Topology, node, nodeRec.Topology)
	}

	mode := req.GetVolumeCapability().GetAccessMode().GetMode()
	want := attachment{AccessMode: mode.String(), ReadOnly: req.GetReadonly(), Since: time.Now().UTC()}

	// A node with an attachment limit counts across volumes: every
	// volume's attachments must hold still (lockAttachments); otherwise
	// only this volume's.
	lock := func() (func(), error) { return p.store.lockVolume(id) }
	if nodeRec.MaxVolumes > 0 {
		lock = p.store.lockAttachments
	}
	unlock, err := lock()
	if err != nil {
		return nil, internal("lock attachments", err)
	}
	defer unlock()
	att, err := p.store.readAttachments(id)
	if err != nil {
		return nil, internal("read attachments", err)
	}
	if have, ok := att.Nodes[node]; ok {
		if have.AccessMode != want.AccessMode || have.ReadOnly != want.ReadOnly {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is attached to node %s as %s readonly=%t, not as %s readonly=%t",
				id, node, have.AccessMode, have.ReadOnly, want.AccessMode, want.ReadOnly)
		}
		return &csipb.ControllerPublishVolumeResponse{PublishContext: publishContext(node, have.ReadOnly)}, nil
	}
	if limit := nodeRec.MaxVolumes; limit > 0 {
		n, err := p.store.attachedTo(node)
		if err != nil {
			return nil, internal("count attachments", err)
		}
		if int64(n) >= limit {
			return nil, status.Errorf(codes.ResourceExhausted, "node %s already has %d volumes attached, its limit", node, n)
		}
	}
	for other, have := range att.Nodes {
		otherMode := csipb.VolumeCapability_AccessMode_Mode(csipb.VolumeCapability_AccessMode_Mode_value[have.AccessMode])
		if isSingleNode(mode) || isSingleNode(otherMode) {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is attached to node %s (%s); a single-node volume cannot also attach to node %s",
				id, other, have.AccessMode, node)
		}
		if mode == csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER && !want.ReadOnly && !have.ReadOnly {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s already has a writer on node %s", id, other)
		}
	}
	att.Nodes[node] = want
	if err := p.store.writeAttachments(id, att); err != nil {
		return nil, internal("write attachments", err)
	}
	return &csipb.ControllerPublishVolumeResponse{PublishContext: publishContext(node, want.ReadOnly)}, nil
}

func publishContext(node string, readOnly bool) map[string]string {
	return map[string]string{PublishContextNode: node, PublishContextReadOnly: strconv.FormatBool(readOnly)}
}

// ControllerUnpublishVolume forgets an attachment; an empty node ID forgets
// every node. Unknown volumes and nodes are success, as the spec asks: the
// volume is certainly not attached there.
func (s *controllerServer) ControllerUnpublishVolume(_ context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	if !validID(id) {
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	}
	p := s.p
	unlock, err := p.store.lockVolume(id)
	if err != nil {
		return nil, internal("lock attachments", err)
	}
	defer unlock()
	att, err := p.store.readAttachments(id)
	if err != nil {
		return nil, internal("read attachments", err)
	}
	if node == "" {
		clear(att.Nodes)
	} else {
		delete(att.Nodes, node)
	}
	if err := p.store.writeAttachments(id, att); err != nil {
		return nil, internal("write attachments", err)
	}
	return &csipb.ControllerUnpublishVolumeResponse{}, nil
}

func (s *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities is required")
	}
	if ok, err := s.p.store.volumeExists(id); err != nil {
		return nil, internal("look up volume", err)
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if why := checkCapability(vc); why != "" {
			return &csipb.ValidateVolumeCapabilitiesResponse{Message: why}, nil
		}
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
