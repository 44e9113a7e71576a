package hostdir

import (
	"context"
	"errors"
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type nodeServer struct {
	csipb.UnimplementedNodeServer
	p *Plugin
}

func (s *nodeServer) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	resp := &csipb.NodeGetInfoResponse{NodeId: s.p.cfg.NodeID, MaxVolumesPerNode: s.p.cfg.MaxVolumes}
	if len(s.p.cfg.Topology) > 0 {
		resp.AccessibleTopology = &csipb.Topology{Segments: maps.Clone(s.p.cfg.Topology)}
	}
	return resp, nil
}

func (s *nodeServer) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	resp := &csipb.NodeGetCapabilitiesResponse{}
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	} {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

// volumeDirOf checks that a volume exists and returns its directory.
func (s *nodeServer) volumeDirOf(id string) (string, error) {
	ok, err := s.p.store.volumeExists(id)
	if err != nil {
		return "", internal("look up volume", err)
	}
	if !ok {
		return "", status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	return s.p.store.volumeDir(id), nil
}

func (s *nodeServer) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if err := requireCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	volDir, err := s.volumeDirOf(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer s.p.nodeLocks.lock(req.GetVolumeId())()
	if err := s.p.mounter.stage(volDir, req.GetStagingTargetPath()); err != nil {
		return nil, mountError("stage", err)
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (s *nodeServer) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	defer s.p.nodeLocks.lock(req.GetVolumeId())()
	if err := s.p.mounter.unstage(req.GetStagingTargetPath()); err != nil {
		return nil, mountError("unstage", err)
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume publishes from the staging path, which must show the
// volume: publishing an unstaged volume is the CO's ordering bug, and the
// error says so instead of quietly publishing the raw directory.
func (s *nodeServer) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "target_path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	if err := requireCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	volDir, err := s.volumeDirOf(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	readOnly := req.GetReadonly() || req.GetPublishContext()[PublishContextReadOnly] == "true" ||
		isReaderOnly(req.GetVolumeCapability().GetAccessMode().GetMode())

	defer s.p.nodeLocks.lock(req.GetVolumeId())()
	singleWriter := req.GetVolumeCapability().GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	if singleWriter {
		// One workload at a time: a second target path on this node is
		// a second workload.
		if t, ok := s.p.swTarget(req.GetVolumeId()); ok && t != req.GetTargetPath() {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is single-node-single-writer and already published at %s", req.GetVolumeId(), t)
		}
	}
	source := volDir
	if staging := req.GetStagingTargetPath(); staging != "" {
		view, bound := stagedView(staging, volDir)
		if view == "" {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", req.GetVolumeId(), staging)
		}
		if bound {
			source = staging
		}
	}
	if err := s.p.mounter.publish(source, volDir, req.GetTargetPath(), readOnly); err != nil {
		return nil, mountError("publish", err)
	}
	if singleWriter {
		s.p.setSWTarget(req.GetVolumeId(), req.GetTargetPath())
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (s *nodeServer) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "target_path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	defer s.p.nodeLocks.lock(req.GetVolumeId())()
	if err := s.p.mounter.unpublish(req.GetTargetPath()); err != nil {
		return nil, mountError("unpublish", err)
	}
	s.p.forgetSWTarget(req.GetVolumeId(), req.GetTargetPath())
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// mountError maps a path conflict to AlreadyExists (the CSI code for "a
// different volume is there") and anything else to Internal.
func mountError(op string, err error) error {
	var inUse errInUse
	if errors.As(err, &inUse) {
		return status.Errorf(codes.AlreadyExists, "%s: %v", op, err)
	}
	return internal(op, err)
}
