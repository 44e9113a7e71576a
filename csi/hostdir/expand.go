package hostdir

import (
	"context"
	"os"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ControllerExpandVolume grows the volume's recorded quota. A directory
// grows by itself, so expansion is only bookkeeping, and it works online
// (attached and published volumes alike). Shrinking is OutOfRange, the
// spec's code for a capacity the plugin does not allow; asking for the
// size the volume has is success, so retries are safe.
func (s *controllerServer) ControllerExpandVolume(_ context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	want, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if want < 0 || limit < 0 || (limit > 0 && want > limit) {
		return nil, status.Errorf(codes.InvalidArgument, "capacity range required=%d limit=%d is not satisfiable", want, limit)
	}
	if vc := req.GetVolumeCapability(); vc != nil {
		if err := requireCapability(vc); err != nil {
			return nil, err
		}
	}
	p := s.p
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()
	if ok, err := p.store.volumeExists(id); err != nil {
		return nil, internal("look up volume", err)
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	meta, err := p.store.readMeta(id)
	if err != nil {
		return nil, internal("read volume metadata", err)
	}
	if meta == nil {
		// A hand-made volume gets a record with its first quota.
		meta = &volumeMeta{Name: id, Created: time.Now().UTC()}
	}
	switch {
	case want < meta.CapacityBytes:
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes; shrinking to %d is not supported", id, meta.CapacityBytes, want)
	case want > meta.CapacityBytes:
		if p.cfg.Capacity > 0 {
			free, err := p.freeCapacity()
			if err != nil {
				return nil, internal("compute free capacity", err)
			}
			if want-meta.CapacityBytes > free {
				return nil, status.Errorf(codes.ResourceExhausted, "growing volume %s by %d bytes needs more than the %d bytes free", id, want-meta.CapacityBytes, free)
			}
		}
		meta.CapacityBytes = want
		if err := writeJSON(p.store.metaFile(id), meta); err != nil {
			return nil, internal("write volume metadata", err)
		}
	}
	// The CO then calls NodeExpandVolume where the volume is staged; the
	// record that call leaves lets tests see the CO took that step.
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: meta.CapacityBytes, NodeExpansionRequired: true}, nil
}

// nodeExpansion is a node plugin's record of the size it last expanded a
// volume to, under expansions/<node>/<volume>.json.
type nodeExpansion struct {
	CapacityBytes int64     `json:"capacity_bytes"`
	Path          string    `json:"path"`
	Expanded      time.Time `json:"expanded"`
}

func (s store) expansionFile(node, volume string) string {
	return filepath.Join(s.root, "expansions", node, volume+".json")
}

// NodeExpandVolume records the new size for a volume this node presents at
// volume_path (staged or published); there is no filesystem to grow. A
// path that does not show the volume is NotFound, as the spec asks.
func (s *nodeServer) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := required("volume_id", id, "volume_path", path); err != nil {
		return nil, err
	}
	if vc := req.GetVolumeCapability(); vc != nil {
		if err := requireCapability(vc); err != nil {
			return nil, err
		}
	}
	volDir, err := s.volumeDirOf(id)
	if err != nil {
		return nil, err
	}
	p := s.p
	defer p.nodeLocks.lock(id)()
	if !showsVolume(path, volDir) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged or published at %s", id, path)
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		meta, err := p.store.readMeta(id)
		if err != nil {
			return nil, internal("read volume metadata", err)
		}
		if meta != nil {
			size = meta.CapacityBytes
		}
	}
	file := p.store.expansionFile(p.cfg.NodeID, id)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, internal("record expansion", err)
	}
	if err := writeJSON(file, nodeExpansion{CapacityBytes: size, Path: path, Expanded: time.Now().UTC()}); err != nil {
		return nil, internal("record expansion", err)
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// showsVolume reports whether path presents volDir: a publish target
// (bind mount or symlink) or a staging directory.
func showsVolume(path, volDir string) bool {
	if sameFile(path, volDir) {
		return true
	}
	view, _ := stagedView(path, volDir)
	return view != ""
}
