package hostdir

import (
	"context"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CreateSnapshot copies the volume's directory. The snapshot ID is derived
// from the name as volume IDs are, so a repeated call finds the snapshot:
// the same source is success, another source AlreadyExists. The copy is
// whole when the call returns, so every snapshot is ready to use.
func (s *controllerServer) CreateSnapshot(_ context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	if err := required("name", req.GetName(), "source_volume_id", req.GetSourceVolumeId()); err != nil {
		return nil, err
	}
	p, src := s.p, req.GetSourceVolumeId()
	id := volumeIDForName(req.GetName())
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()

	have, err := p.store.readSnapshot(id)
	if err != nil {
		return nil, internal("read snapshot", err)
	}
	if have != nil {
		if have.SourceVolumeID != src {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists of volume %s, not of %s", id, have.SourceVolumeID, src)
		}
		return &csipb.CreateSnapshotResponse{Snapshot: snapshotOf(id, have)}, nil
	}
	if ok, err := p.store.volumeExists(src); err != nil {
		return nil, internal("look up volume", err)
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "source volume %s not found", src)
	}
	meta, err := p.store.readMeta(src)
	if err != nil {
		return nil, internal("read volume metadata", err)
	}
	snap := snapshotMeta{Name: req.GetName(), SourceVolumeID: src, Created: time.Now().UTC()}
	if meta != nil {
		// The size is the source's quota: a volume restored from the
		// snapshot needs at least that much.
		snap.SizeBytes, snap.Topology = meta.CapacityBytes, meta.Topology
	}
	if err := p.store.writeSnapshot(id, src, snap); err != nil {
		return nil, internal("create snapshot", err)
	}
	return &csipb.CreateSnapshotResponse{Snapshot: snapshotOf(id, &snap)}, nil
}

// DeleteSnapshot removes a snapshot; an unknown one is success, as the spec
// asks. Volumes made from it are copies and keep their data.
func (s *controllerServer) DeleteSnapshot(_ context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if err := required("snapshot_id", id); err != nil {
		return nil, err
	}
	if !validID(id) {
		return &csipb.DeleteSnapshotResponse{}, nil
	}
	s.p.ctrlMu.Lock()
	defer s.p.ctrlMu.Unlock()
	if err := s.p.store.deleteSnapshot(id); err != nil {
		return nil, internal("delete snapshot", err)
	}
	return &csipb.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists snapshots, all or those matching snapshot_id and
// source_volume_id. Filters that match nothing give an empty list, not
// NotFound: the spec says so for both.
func (s *controllerServer) ListSnapshots(_ context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	st := s.p.store
	var ids []string
	if id := req.GetSnapshotId(); id != "" {
		if validID(id) {
			ids = []string{id}
		}
	} else {
		var err error
		if ids, err = st.snapshotIDs(); err != nil {
			return nil, internal("list snapshots", err)
		}
	}
	var match []string
	metas := make(map[string]*snapshotMeta, len(ids))
	for _, id := range ids {
		m, err := st.readSnapshot(id)
		if err != nil {
			return nil, internal("read snapshot", err)
		}
		if m == nil || (req.GetSourceVolumeId() != "" && m.SourceVolumeID != req.GetSourceVolumeId()) {
			continue
		}
		match, metas[id] = append(match, id), m
	}
	match, next, err := page(match, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListSnapshotsResponse{NextToken: next}
	for _, id := range match {
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: snapshotOf(id, metas[id])})
	}
	return resp, nil
}

func snapshotOf(id string, m *snapshotMeta) *csipb.Snapshot {
	return &csipb.Snapshot{
		SnapshotId:     id,
		SourceVolumeId: m.SourceVolumeID,
		SizeBytes:      m.SizeBytes,
		CreationTime:   timestamppb.New(m.Created),
		ReadyToUse:     true,
	}
}
