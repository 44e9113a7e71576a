package httpapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/claimd/claimd/structs"
)

// GET /v1/allocs[?node=ID]: what `claimd alloc status -json` prints.
func (s *Server) allocList(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.AllocListResponse
	args := &structs.AllocListRequest{NodeID: r.URL.Query().Get("node"), QueryOptions: opts}
	if err := s.rpc(r, "Alloc.List", args, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return orEmpty(out.Allocs), nil
}

// GET /v1/alloc/{id}
func (s *Server) allocGet(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.AllocResponse
	if err := s.rpc(r, "Alloc.Get", &structs.AllocSpecificRequest{ID: r.PathValue("id"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Alloc, nil
}

// placeResult names the allocations placed (IDs the servers' callers left
// out are made here, as `claimd alloc run` does).
type placeResult struct {
	Index  uint64   `json:"index"`
	Allocs []string `json:"allocs"`
}

// PUT|POST /v1/allocs: one allocation or an array, in the JSON shape of
// `claimd alloc status -json` ({"id", "node_id", "volumes": [{"volume_id",
// "read_only"}]}); what `claimd alloc run` places.
func (s *Server) allocPlace(w http.ResponseWriter, r *http.Request) (any, error) {
	raw, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	var allocs []*structs.Alloc
	if bytes.HasPrefix(raw, []byte("[")) {
		err = decodeJSON(raw, &allocs)
	} else {
		var a structs.Alloc
		err = decodeJSON(raw, &a)
		allocs = []*structs.Alloc{&a}
	}
	if err != nil {
		return nil, err
	}
	res := placeResult{Allocs: []string{}}
	for _, a := range allocs {
		if a != nil && a.ID == "" {
			a.ID = newID()
		}
		if a != nil {
			res.Allocs = append(res.Allocs, a.ID)
		}
	}
	var out structs.GenericResponse
	if err := s.rpc(r, "Alloc.Place", &structs.AllocPlaceRequest{Allocs: allocs}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	res.Index = out.Index
	return res, nil
}

// POST /v1/alloc/{id}/stop: the servers release its claims once its node
// reports it stopped.
func (s *Server) allocStop(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.GenericResponse
	if err := s.rpc(r, "Alloc.Stop", &structs.AllocStopRequest{AllocIDs: []string{r.PathValue("id")}}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}

// GET /v1/nodes: what `claimd node status -json` prints (never a node's
// secret: the servers blank it).
func (s *Server) nodeList(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.NodeListResponse
	if err := s.rpc(r, "Node.List", &structs.NodeListRequest{QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return orEmpty(out.Nodes), nil
}

// GET /v1/node/{id}
func (s *Server) nodeGet(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.NodeResponse
	if err := s.rpc(r, "Node.Get", &structs.NodeSpecificRequest{ID: r.PathValue("id"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Node, nil
}

// GET /v1/plugins: what `claimd plugin status -json` prints.
func (s *Server) pluginList(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.PluginListResponse
	if err := s.rpc(r, "Plugin.List", &structs.PluginListRequest{QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return orEmpty(out.Plugins), nil
}

// GET /v1/plugin/{id}
func (s *Server) pluginGet(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.PluginResponse
	if err := s.rpc(r, "Plugin.Get", &structs.PluginSpecificRequest{ID: r.PathValue("id"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Plugin, nil
}

// GET /v1/evals[?status=S][&volume=ID]: what `claimd eval list -json`
// prints.
func (s *Server) evalList(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	var out structs.EvalListResponse
	args := &structs.EvalListRequest{Status: structs.EvalStatus(q.Get("status")), VolumeID: q.Get("volume"), QueryOptions: opts}
	if err := s.rpc(r, "Eval.List", args, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return orEmpty(out.Evals), nil
}

// GET /v1/eval/{id}
func (s *Server) evalGet(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.EvalResponse
	if err := s.rpc(r, "Eval.Get", &structs.EvalSpecificRequest{ID: r.PathValue("id"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Eval, nil
}

// newID is a random UUID-shaped ID, like the CLI's.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
