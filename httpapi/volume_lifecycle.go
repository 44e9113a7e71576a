package httpapi

import (
	"net/http"

	"github.com/claimd/claimd/structs"
)

// PUT|POST /v1/volume/{id}/snapshot: {"name": ..., "parameters": {...}};
// answers the plugin's snapshot. A repeat with the same name returns the
// same snapshot.
func (s *Server) snapshotCreate(w http.ResponseWriter, r *http.Request) (any, error) {
	var body struct {
		Name       string            `json:"name"`
		Parameters map[string]string `json:"parameters,omitempty"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	var out structs.VolumeSnapshotCreateResponse
	args := &structs.VolumeSnapshotCreateRequest{VolumeID: r.PathValue("id"), Name: body.Name, Parameters: body.Parameters}
	if err := s.rpc(r, "Volume.SnapshotCreate", args, &out); err != nil {
		return nil, err
	}
	return out.Snapshot, nil
}

// GET /v1/snapshots[?plugin=ID]: what `claimd volume snapshot list -json`
// prints.
func (s *Server) snapshotList(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.VolumeSnapshotListResponse
	if err := s.rpc(r, "Volume.SnapshotList", &structs.VolumeSnapshotListRequest{PluginID: r.URL.Query().Get("plugin")}, &out); err != nil {
		return nil, err
	}
	out.Snapshots = orEmpty(out.Snapshots)
	return &out, nil
}

// DELETE /v1/snapshot?plugin=ID&id=SNAPSHOT (query parameters: a plugin's
// snapshot IDs may hold any character).
func (s *Server) snapshotDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	var out structs.GenericResponse
	if err := s.rpc(r, "Volume.SnapshotDelete", &structs.VolumeSnapshotDeleteRequest{PluginID: q.Get("plugin"), SnapshotID: q.Get("id")}, &out); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// expansionResult is one volume's growth in an answer: the size recorded
// before and now, and the nodes that still must expand (run `volume
// expand` again once they are back).
type expansionResult struct {
	VolumeID      string            `json:"volume_id"`
	Previous      int64             `json:"previous_capacity"`
	Capacity      int64             `json:"capacity"`
	NodesExpanded []string          `json:"nodes_expanded"`
	NodesPending  map[string]string `json:"nodes_pending,omitempty"`
	CapacityIndex uint64            `json:"capacity_index"`
}

func newExpansionResult(x *structs.VolumeExpansion) expansionResult {
	return expansionResult{VolumeID: x.VolumeID, Previous: x.Previous, Capacity: x.Capacity,
		NodesExpanded: orEmpty(x.NodesExpanded), NodesPending: x.NodesPending, CapacityIndex: x.CapacityIndex}
}

// expandResult is the body of an expansion, with the volume as recorded
// afterwards.
type expandResult struct {
	Volume *structs.Volume `json:"volume"`
	expansionResult
	Index uint64 `json:"index"`
}

// PUT|POST /v1/volume/{id}/expand: {"capacity": BYTES}.
// PUT|POST /v1/volume/{id}/modify: `claimd volume modify`; the body is
// {"mutable_parameters": {...}}. Answers the recorded volume.
func (s *Server) volumeModify(w http.ResponseWriter, r *http.Request) (any, error) {
	var body struct {
		MutableParameters map[string]string `json:"mutable_parameters"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	var out structs.VolumeModifyResponse
	if err := s.rpc(r, "Volume.Modify", &structs.VolumeModifyRequest{VolumeID: r.PathValue("id"), MutableParameters: body.MutableParameters}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return out.Volume, nil
}

func (s *Server) volumeExpand(w http.ResponseWriter, r *http.Request) (any, error) {
	var body struct {
		Capacity int64 `json:"capacity"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	var out structs.VolumeExpandResponse
	if err := s.rpc(r, "Volume.Expand", &structs.VolumeExpandRequest{VolumeID: r.PathValue("id"), Capacity: body.Capacity}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return expandResult{Volume: out.Volume, expansionResult: newExpansionResult(&out.VolumeExpansion), Index: out.Index}, nil
}
