package hostdir

import (
	"context"
	"fmt"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Volume health (CSI 1.13's GET_VOLUME_HEALTH and LIST_VOLUME_HEALTH,
// which replaced VOLUME_CONDITION). A directory has no health of its
// own: what a volume reports is what StorageSetHealth recorded for it
// under Root (health/<id>.json), as a storage's monitoring would; none
// means healthy.

// HealthStatus is one adverse condition: a CSI VolumeHealthErrorType name
// (DEGRADED, INACCESSIBLE, DATA_LOSS) and a reason.
type HealthStatus struct {
	Type   string `json:"type"`
	Reason string `json:"reason,omitempty"`
}

type healthRecord struct {
	Statuses []HealthStatus `json:"statuses"`
}

func (s store) healthFile(id string) string { return filepath.Join(s.root, "health", id+".json") }

func (s store) readHealth(id string) ([]HealthStatus, error) {
	var rec healthRecord
	if _, err := readJSON(s.healthFile(id), &rec); err != nil {
		return nil, err
	}
	return rec.Statuses, nil
}

// StorageSetHealth records a volume's adverse conditions under root; none
// clears them (the volume is healthy again).
func StorageSetHealth(root, volumeID string, statuses ...HealthStatus) error {
	if !validID(volumeID) {
		return fmt.Errorf("hostdir: volume %q is not valid", volumeID)
	}
	for _, st := range statuses {
		if _, ok := csipb.VolumeHealthErrorType_value[st.Type]; !ok {
			return fmt.Errorf("hostdir: health type %q is not a CSI VolumeHealthErrorType", st.Type)
		}
	}
	st := store{root: root}
	if err := st.init(); err != nil {
		return err
	}
	return writeJSON(st.healthFile(volumeID), healthRecord{Statuses: statuses})
}

func toVolumeHealth(id string, statuses []HealthStatus) *csipb.VolumeHealth {
	vh := &csipb.VolumeHealth{VolumeId: id}
	for _, st := range statuses {
		vh.HealthStatuses = append(vh.HealthStatuses, &csipb.VolumeHealth_VolumeHealthEntry{
			Status: csipb.VolumeHealthErrorType(csipb.VolumeHealthErrorType_value[st.Type]), Reason: st.Reason})
	}
	return vh
}

func (p *Plugin) volumeHealth(id string) (*csipb.VolumeHealth, error) {
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	if !validID(id) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	if ok, err := p.store.volumeExists(id); err != nil {
		return nil, internal("look up volume", err)
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	statuses, err := p.store.readHealth(id)
	if err != nil {
		return nil, internal("read volume health", err)
	}
	return toVolumeHealth(id, statuses), nil
}

// ControllerGetVolumeHealth reports one volume's conditions.
func (s *controllerServer) ControllerGetVolumeHealth(_ context.Context, req *csipb.ControllerGetVolumeHealthRequest) (*csipb.ControllerGetVolumeHealthResponse, error) {
	vh, err := s.p.volumeHealth(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csipb.ControllerGetVolumeHealthResponse{VolumeHealth: vh}, nil
}

// ControllerListVolumeHealth reports every volume's conditions, paged as
// ListVolumes is.
func (s *controllerServer) ControllerListVolumeHealth(_ context.Context, req *csipb.ControllerListVolumeHealthRequest) (*csipb.ControllerListVolumeHealthResponse, error) {
	ids, err := s.p.store.volumeIDs()
	if err != nil {
		return nil, internal("list volumes", err)
	}
	ids, next, err := page(ids, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csipb.ControllerListVolumeHealthResponse{NextToken: next}
	for _, id := range ids {
		statuses, err := s.p.store.readHealth(id)
		if err != nil {
			return nil, internal("read volume health", err)
		}
		resp.Entries = append(resp.Entries, toVolumeHealth(id, statuses))
	}
	return resp, nil
}

// NodeGetVolumeHealth reports a volume's conditions as this node sees
// them: the storage's record (hostdir has no node-local view of its own).
func (s *nodeServer) NodeGetVolumeHealth(_ context.Context, req *csipb.NodeGetVolumeHealthRequest) (*csipb.NodeGetVolumeHealthResponse, error) {
	vh, err := s.p.volumeHealth(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csipb.NodeGetVolumeHealthResponse{VolumeHealth: vh}, nil
}
