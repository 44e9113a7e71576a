package hostdir

import (
	"context"
	"sort"
	"strings"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tokenPrefix marks a pagination token. A token names the last ID of the
// page before rather than an offset, so that volumes created or deleted
// between two pages neither repeat nor hide the ones after them.
const tokenPrefix = "after:"

// page returns the IDs of one page of ids (sorted) and the token for the
// next, "" at the end. A token hostdir did not make is Aborted, as the
// spec asks for an invalid starting_token.
func page(ids []string, token string, maxEntries int32) ([]string, string, error) {
	if maxEntries < 0 {
		return nil, "", status.Errorf(codes.InvalidArgument, "max_entries %d is negative", maxEntries)
	}
	if token != "" {
		after, ok := strings.CutPrefix(token, tokenPrefix)
		if !ok || !validID(after) {
			return nil, "", status.Errorf(codes.Aborted, "starting_token %q was not made by this plugin", token)
		}
		ids = ids[sort.SearchStrings(ids, after):]
		if len(ids) > 0 && ids[0] == after {
			ids = ids[1:]
		}
	}
	if maxEntries == 0 || int(maxEntries) >= len(ids) {
		return ids, "", nil
	}
	ids = ids[:maxEntries]
	return ids, tokenPrefix + ids[len(ids)-1], nil
}

// ListVolumes lists every volume under Root, made by CreateVolume or by
// hand, with what CreateVolume recorded.
func (s *controllerServer) ListVolumes(_ context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	st := s.p.store
	ids, err := st.volumeIDs()
	if err != nil {
		return nil, internal("list volumes", err)
	}
	ids, next, err := page(ids, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListVolumesResponse{NextToken: next}
	for _, id := range ids {
		meta, err := st.readMeta(id)
		if err != nil {
			return nil, internal("read volume metadata", err)
		}
		nodes, err := st.publishedNodes(id)
		if err != nil {
			return nil, internal("read attachments", err)
		}
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{Volume: volumeOf(id, meta),
			Status: &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes}})
	}
	return resp, nil
}

// ControllerGetVolume answers for one volume, with the nodes it is
// attached to.
func (s *controllerServer) ControllerGetVolume(_ context.Context, req *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	st := s.p.store
	if !validID(id) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	if ok, err := st.volumeExists(id); err != nil {
		return nil, internal("look up volume", err)
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	meta, err := st.readMeta(id)
	if err != nil {
		return nil, internal("read volume metadata", err)
	}
	nodes, err := st.publishedNodes(id)
	if err != nil {
		return nil, internal("read attachments", err)
	}
	return &csipb.ControllerGetVolumeResponse{Volume: volumeOf(id, meta),
		Status: &csipb.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: nodes}}, nil
}

// GetCapacity reports the bytes free for new volumes. Asked about a
// topology this plugin's volumes are not in, it has none there.
func (s *controllerServer) GetCapacity(_ context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	if t := req.GetAccessibleTopology(); t != nil && len(s.p.cfg.Topology) > 0 && !topologyMatches(t.GetSegments(), s.p.cfg.Topology) {
		return &csipb.GetCapacityResponse{}, nil
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if checkCapability(vc) != "" {
			return &csipb.GetCapacityResponse{}, nil
		}
	}
	free, err := s.p.freeCapacity()
	if err != nil {
		return nil, internal("compute free capacity", err)
	}
	return &csipb.GetCapacityResponse{AvailableCapacity: free}, nil
}

// freeCapacity is what a new volume's quota may take. With a configured
// capacity, quotas are allocated from it: the capacity less every recorded
// quota. Otherwise quotas are not reserved space (a directory is thin), and
// the bound is the free space of Root's filesystem.
func (p *Plugin) freeCapacity() (int64, error) {
	if p.cfg.Capacity <= 0 {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(p.cfg.Root, &fs); err != nil {
			return 0, err
		}
		return int64(fs.Bavail) * int64(fs.Bsize), nil
	}
	ids, err := p.store.volumeIDs()
	if err != nil {
		return 0, err
	}
	free := p.cfg.Capacity
	for _, id := range ids {
		meta, err := p.store.readMeta(id)
		if err != nil {
			return 0, err
		}
		if meta != nil {
			free -= meta.CapacityBytes
		}
	}
	return max(free, 0), nil
}
