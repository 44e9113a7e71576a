package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/claimd/claimd/structs"
)

// GET /v1/volumes[?plugin=ID]: what `claimd volume status -json` prints.
func (s *Server) volumeList(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.VolumeListResponse
	args := &structs.VolumeListRequest{PluginID: r.URL.Query().Get("plugin"), QueryOptions: opts}
	if err := s.rpc(r, "Volume.List", args, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return orEmpty(out.Volumes), nil
}

// GET /v1/volume/{id}: what `claimd volume status -json ID` prints.
func (s *Server) volumeGet(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.VolumeResponse
	if err := s.rpc(r, "Volume.Get", &structs.VolumeSpecificRequest{ID: r.PathValue("id"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Volume, nil
}

// PUT|POST /v1/volumes: one volume spec or an array of them, as the file
// `claimd volume register` reads.
func (s *Server) volumesRegister(w http.ResponseWriter, r *http.Request) (any, error) {
	raw, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	var vols []*structs.Volume
	if bytes.HasPrefix(raw, []byte("[")) {
		if err := decodeJSON(raw, &vols); err != nil {
			return nil, err
		}
	} else {
		var v structs.Volume
		if err := decodeJSON(raw, &v); err != nil {
			return nil, err
		}
		vols = []*structs.Volume{&v}
	}
	return s.register(w, r, vols)
}

// PUT|POST /v1/volume/{id}: one volume spec; its id may be left out.
func (s *Server) volumeRegister(w http.ResponseWriter, r *http.Request) (any, error) {
	var v structs.Volume
	if err := decodeBody(w, r, &v); err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	switch v.ID {
	case "":
		v.ID = id
	case id:
	default:
		return nil, structs.Invalid("id", fmt.Sprintf("%q in the body is not %q of the URL", v.ID, id))
	}
	return s.register(w, r, []*structs.Volume{&v})
}

// registerResult is a volume registration's answer: Expanded lists the
// registered volumes it grew (a spec asking for more than recorded), and
// Index is then the last capacity entry's.
type registerResult struct {
	Index         uint64            `json:"index"`
	RegisterIndex uint64            `json:"register_index"`
	Volumes       []string          `json:"volumes"`
	Expanded      []expansionResult `json:"expanded,omitempty"`
}

func (s *Server) register(w http.ResponseWriter, r *http.Request, vols []*structs.Volume) (any, error) {
	var out structs.VolumeRegisterResponse
	if err := s.rpc(r, "Volume.Register", &structs.VolumeRegisterRequest{Volumes: vols}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	res := registerResult{Index: out.Index, RegisterIndex: out.RegisterIndex, Volumes: []string{}}
	for _, v := range vols {
		res.Volumes = append(res.Volumes, v.ID)
	}
	for _, x := range out.Expanded {
		res.Expanded = append(res.Expanded, newExpansionResult(x))
	}
	return res, nil
}

// DELETE /v1/volume/{id}[?force]
func (s *Server) volumeDeregister(w http.ResponseWriter, r *http.Request) (any, error) {
	force, err := flagParam(r, "force")
	if err != nil {
		return nil, err
	}
	var out structs.GenericResponse
	args := &structs.VolumeDeregisterRequest{VolumeIDs: []string{r.PathValue("id")}, Force: force}
	if err := s.rpc(r, "Volume.Deregister", args, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}

// detachResult is `claimd volume detach`'s answer.
type detachResult struct {
	Released []string `json:"released"`
	Forced   []string `json:"forced"`
	Index    uint64   `json:"index"`
}

// POST /v1/volume/{id}/detach?node=NODE[&force]
func (s *Server) volumeDetach(w http.ResponseWriter, r *http.Request) (any, error) {
	force, err := flagParam(r, "force")
	if err != nil {
		return nil, err
	}
	node := r.URL.Query().Get("node")
	if strings.TrimSpace(node) == "" {
		return nil, structs.Invalid("node", "required: the node whose claims to release (?node=ID)")
	}
	var out structs.VolumeDetachResponse
	args := &structs.VolumeDetachRequest{VolumeID: r.PathValue("id"), NodeID: node, Force: force}
	if err := s.rpc(r, "Volume.Detach", args, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return detachResult{Released: orEmpty(out.Released), Forced: orEmpty(out.Forced), Index: out.Index}, nil
}

// orEmpty makes a nil list [] in JSON, as the CLI prints it.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// PUT|POST /v1/volume/{id}/create: a volume create spec; its id may be
// left out.
func (s *Server) volumeCreate(w http.ResponseWriter, r *http.Request) (any, error) {
	var spec structs.VolumeCreateSpec
	if err := decodeBody(w, r, &spec); err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	switch spec.ID {
	case "":
		spec.ID = id
	case id:
	default:
		return nil, structs.Invalid("id", fmt.Sprintf("%q in the body is not %q of the URL", spec.ID, id))
	}
	var out structs.VolumeCreateResponse
	if err := s.rpc(r, "Volume.Create", &structs.VolumeCreateRequest{Volume: &spec}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	if out.Expanded == nil {
		return out.Volume, nil
	}
	// A repeat that grew the volume: the volume, and how far growing got.
	return struct {
		*structs.Volume
		Expanded expansionResult `json:"expanded"`
	}{out.Volume, newExpansionResult(out.Expanded)}, nil
}

// DELETE /v1/volume/{id}/delete
func (s *Server) volumeDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.GenericResponse
	if err := s.rpc(r, "Volume.Delete", &structs.VolumeDeleteRequest{VolumeID: r.PathValue("id")}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}
