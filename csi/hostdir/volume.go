package hostdir

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// contentSource is a request's volume content source as recorded in
// volumeMeta.Source: "snapshot:<id>", "volume:<id>" or "".
func contentSource(cs *csipb.VolumeContentSource) (string, error) {
	switch {
	case cs == nil:
		return "", nil
	case cs.GetSnapshot() != nil:
		if err := required("volume_content_source.snapshot.snapshot_id", cs.GetSnapshot().GetSnapshotId()); err != nil {
			return "", err
		}
		return "snapshot:" + cs.GetSnapshot().GetSnapshotId(), nil
	case cs.GetVolume() != nil:
		if err := required("volume_content_source.volume.volume_id", cs.GetVolume().GetVolumeId()); err != nil {
			return "", err
		}
		return "volume:" + cs.GetVolume().GetVolumeId(), nil
	}
	return "", status.Error(codes.InvalidArgument, "volume_content_source names neither a snapshot nor a volume")
}

// CreateVolume makes the volume directory, empty or as a copy of a snapshot
// or another volume, and records its quota. The volume ID is derived from
// the name, so a repeated call finds the same volume; it is AlreadyExists
// when the recorded volume is not what the new request asks for (capacity
// outside the range, other parameters, source or topology).
//
// A new volume is built under a name that is not a valid ID and renamed
// into place once its data and metadata are complete, so no one ever sees
// half a copy as a volume.
func (s *controllerServer) CreateVolume(_ context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	if err := required("name", req.GetName()); err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities is required")
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if err := requireCapability(vc); err != nil {
			return nil, err
		}
	}
	if err := checkMutable(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	source, err := contentSource(req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	want, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if want < 0 || limit < 0 || (limit > 0 && want > limit) {
		return nil, status.Errorf(codes.InvalidArgument, "capacity range required=%d limit=%d is not satisfiable", want, limit)
	}

	p := s.p
	id := volumeIDForName(req.GetName())
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()

	exists, err := p.store.volumePresent(id)
	if err != nil {
		return nil, internal("look up volume", err)
	}
	if exists {
		return s.existingVolume(id, req, source)
	}

	topology, err := p.volumeTopology(req.GetAccessibilityRequirements())
	if err != nil {
		return nil, err
	}
	srcDir, srcSize, err := s.resolveSource(source)
	if err != nil {
		return nil, err
	}
	capacity := want
	if capacity < srcSize {
		if limit > 0 && srcSize > limit {
			return nil, status.Errorf(codes.OutOfRange, "the source %s holds %d bytes, more than the limit %d", source, srcSize, limit)
		}
		capacity = srcSize
	}
	if free, err := p.freeCapacity(); err != nil {
		return nil, internal("compute free capacity", err)
	} else if capacity > free {
		return nil, status.Errorf(codes.ResourceExhausted, "capacity %d is more than the %d bytes free", capacity, free)
	}

	tmp := filepath.Join(p.store.root, "volumes", ".new-"+id)
	// Left by a crash of an earlier attempt; ctrlMu keeps a live one away.
	if err := os.RemoveAll(tmp); err != nil {
		return nil, internal("clear partial volume", err)
	}
	if srcDir != "" {
		err = copyTree(srcDir, tmp)
	} else {
		err = os.Mkdir(tmp, 0o755)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, internal("create volume directory", err)
	}
	meta := volumeMeta{
		Name: req.GetName(), CapacityBytes: capacity, Created: time.Now().UTC(),
		Parameters: req.GetParameters(), Source: source, Topology: topology,
		Mutable: req.GetMutableParameters(),
	}
	if err := writeJSON(p.store.metaFile(id), meta); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, internal("write volume metadata", err)
	}
	if err := os.Rename(tmp, p.store.volumeDir(id)); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, internal("move volume into place", err)
	}
	return &csipb.CreateVolumeResponse{Volume: volumeOf(id, &meta)}, nil
}

// existingVolume answers a CreateVolume for a name whose volume exists.
func (s *controllerServer) existingVolume(id string, req *csipb.CreateVolumeRequest, source string) (*csipb.CreateVolumeResponse, error) {
	meta, err := s.p.store.readMeta(id)
	if err != nil {
		return nil, internal("read volume metadata", err)
	}
	if meta == nil {
		// Made by hand: nothing recorded, no quota.
		meta = &volumeMeta{}
	}
	want, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	switch {
	case meta.CapacityBytes < want || (limit > 0 && meta.CapacityBytes > limit):
		return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with capacity %d, outside the requested range [%d, %d]", id, meta.CapacityBytes, want, limit)
	case !maps.Equal(meta.Parameters, req.GetParameters()):
		return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with parameters %v, not %v", id, meta.Parameters, req.GetParameters())
	case meta.Source != source:
		return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with content source %q, not %q", id, meta.Source, source)
	case !topologyOK(meta.Topology, req.GetAccessibilityRequirements()):
		return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with accessible topology %v, outside the requisite topologies", id, meta.Topology)
	}
	return &csipb.CreateVolumeResponse{Volume: volumeOf(id, meta)}, nil
}

// resolveSource returns the directory to copy a new volume from and the
// bytes it needs: the snapshot's size or the source volume's quota. A
// missing source is NotFound, as the spec asks.
func (s *controllerServer) resolveSource(source string) (dir string, size int64, err error) {
	st := s.p.store
	kind, id, _ := cutSource(source)
	switch kind {
	case "snapshot":
		snap, err := st.readSnapshot(id)
		if err != nil {
			return "", 0, internal("read snapshot", err)
		}
		if snap == nil {
			return "", 0, status.Errorf(codes.NotFound, "snapshot %s not found", id)
		}
		return st.snapshotDir(id), snap.SizeBytes, nil
	case "volume":
		ok, err := st.volumePresent(id)
		if err != nil {
			return "", 0, internal("look up volume", err)
		}
		if !ok {
			return "", 0, status.Errorf(codes.NotFound, "source volume %s not found", id)
		}
		meta, err := st.readMeta(id)
		if err != nil {
			return "", 0, internal("read volume metadata", err)
		}
		if meta != nil {
			size = meta.CapacityBytes
		}
		return st.volumeDir(id), size, nil
	}
	return "", 0, nil
}

func cutSource(source string) (kind, id string, ok bool) {
	return strings.Cut(source, ":")
}

// volumeOf is the CSI description of a volume from its metadata.
func volumeOf(id string, meta *volumeMeta) *csipb.Volume {
	v := &csipb.Volume{VolumeId: id}
	if meta == nil {
		return v
	}
	v.CapacityBytes = meta.CapacityBytes
	v.AccessibleTopology = toCSITopology(meta.Topology)
	switch kind, src, _ := cutSource(meta.Source); kind {
	case "snapshot":
		v.ContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: src},
		}}
	case "volume":
		v.ContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
			Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: src},
		}}
	}
	return v
}

// DeleteVolume removes the volume and its data. A volume still attached to
// a node is refused: deleting it would pull the data from under a workload.
func (s *controllerServer) DeleteVolume(_ context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	if !validID(id) {
		return &csipb.DeleteVolumeResponse{}, nil
	}
	p := s.p
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()
	unlock, err := p.store.lockAttachments()
	if err != nil {
		return nil, internal("lock attachments", err)
	}
	defer unlock()
	att, err := p.store.readAttachments(id)
	if err != nil {
		return nil, internal("read attachments", err)
	}
	if len(att.Nodes) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still attached to nodes %v", id, sortedKeys(att.Nodes))
	}
	if err := os.RemoveAll(p.store.volumeDir(id)); err != nil {
		return nil, internal("remove volume", err)
	}
	if err := os.Remove(p.store.metaFile(id)); err != nil && !os.IsNotExist(err) {
		return nil, internal("remove volume metadata", err)
	}
	// What node plugins recorded of the volume's size goes with it.
	stale, _ := filepath.Glob(filepath.Join(p.store.root, "expansions", "*", id+".json"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
	return &csipb.DeleteVolumeResponse{}, nil
}
