package hostdir

import (
	"context"
	"maps"
	"slices"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MutableParameters are the parameters ControllerModifyVolume may change
// on a hostdir volume. They are bookkeeping (a directory has no tier or
// IOPS), recorded in the volume's metadata so a CO's change can be seen.
var MutableParameters = []string{"tier", "iops", "throughput"}

// ControllerModifyVolume records new values of mutable parameters. Keys
// hostdir does not know are refused, naming the key, and nothing changes.
func (s *controllerServer) ControllerModifyVolume(_ context.Context, req *csipb.ControllerModifyVolumeRequest) (*csipb.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	params := req.GetMutableParameters()
	p := s.p
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()
	if !validID(id) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	if ok, err := p.store.volumeExists(id); err != nil {
		return nil, internal("look up volume", err)
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	if err := checkMutable(params); err != nil {
		return nil, err
	}
	meta, err := p.store.readMeta(id)
	if err != nil {
		return nil, internal("read volume metadata", err)
	}
	if meta == nil {
		meta = &volumeMeta{Name: id, Created: time.Now().UTC()}
	}
	if meta.Mutable == nil {
		meta.Mutable = map[string]string{}
	}
	maps.Copy(meta.Mutable, params)
	if err := writeJSON(p.store.metaFile(id), meta); err != nil {
		return nil, internal("write volume metadata", err)
	}
	return &csipb.ControllerModifyVolumeResponse{}, nil
}

// checkMutable refuses a mutable parameter hostdir does not know, naming
// it.
func checkMutable(params map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !slices.Contains(MutableParameters, k) {
			return status.Errorf(codes.InvalidArgument, "mutable_parameters: %q is not mutable on hostdir (mutable: %v)", k, MutableParameters)
		}
	}
	return nil
}
