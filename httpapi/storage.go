package httpapi

import (
	"net/http"

	"github.com/claimd/claimd/structs"
)

// POST /v1/volumes/reconcile[?volume=ID]: `claimd volume reconcile`.
func (s *Server) volumesReconcile(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.VolumeReconcileResponse
	args := &structs.VolumeReconcileRequest{VolumeID: r.URL.Query().Get("volume")}
	if err := s.rpc(r, "Volume.Reconcile", args, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return orEmpty(out.Reports), nil
}

// GET /v1/storage/reports[?plugin=ID]: the last reconciliation rounds.
func (s *Server) storageReports(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.StorageReportListResponse
	if err := s.rpc(r, "Volume.StorageReports", &structs.StorageReportListRequest{PluginID: r.URL.Query().Get("plugin"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return orEmpty(out.Reports), nil
}

// GET /v1/volume/{id}/usage: what the nodes holding live claims report
// of the volume now (NodeGetVolumeStats), recorded nowhere.
func (s *Server) volumeUsage(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.VolumeUsageResponse
	if err := s.rpc(r, "Volume.Usage", &structs.VolumeUsageRequest{VolumeID: r.PathValue("id")}, &out); err != nil {
		return nil, err
	}
	return orEmpty(out.Usage), nil
}

// storageView is GET /v1/volume/{id}/storage's answer.
type storageView struct {
	Found          bool                   `json:"found"`
	Supported      bool                   `json:"supported"`
	Volume         *structs.StorageVolume `json:"volume,omitempty"`
	PublishedNodes map[string]string      `json:"published_nodes"`
}

// GET /v1/volume/{id}/storage: what the storage says of the volume now
// (nothing recorded), as shown before a forced detach.
func (s *Server) volumeStorage(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.VolumeStorageResponse
	if err := s.rpc(r, "Volume.Storage", &structs.VolumeStorageRequest{VolumeID: r.PathValue("id")}, &out); err != nil {
		return nil, err
	}
	if out.PublishedNodes == nil {
		out.PublishedNodes = map[string]string{}
	}
	return storageView{Found: out.Found, Supported: out.Supported, Volume: out.Volume, PublishedNodes: out.PublishedNodes}, nil
}
