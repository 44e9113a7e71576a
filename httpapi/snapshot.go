package httpapi

import (
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/snapshot/inspect"
	"github.com/claimd/claimd/structs"
)

// maxInspectBytes bounds an archive uploaded only to be inspected (a
// restore's is maxRestoreBytes). Both are streamed, never held whole:
// guard reads either only for a valid token, a few at once.
const maxInspectBytes = 1 << 30

// snapshotSave serves GET /v1/operator/snapshot[?stale]: the archive of
// the whole state (gzip'd tar), taken by the leader. The snapshot stream
// checks the caller's token (a management token: the archive holds every
// secret). It is received into a temporary file first, so that a stream
// that fails midway is an error status rather than a cut download.
func (s *Server) snapshotSave(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, []string{"stale"}); err != nil {
		s.writeError(w, r, err)
		return
	}
	tmp, err := os.CreateTemp("", "claimd-http-snapshot-")
	if err != nil {
		s.writeError(w, r, structs.NewError(structs.CodeUnavailable, "snapshot: temporary file: "+err.Error()))
		return
	}
	defer func() { tmp.Close(); os.Remove(tmp.Name()) }()
	_, stale := r.URL.Query()["stale"]
	token, err := requestToken(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	meta, err := s.api.SnapshotSave(r.Context(), tmp, api.SnapshotOptions{
		AllowStale: stale, Token: token})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		s.writeError(w, r, structs.NewError(structs.CodeUnavailable, "snapshot: "+err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", `attachment; filename="claimd-`+strconv.FormatUint(meta.Index, 10)+`.snap"`)
	w.Header().Set(IndexHeader, strconv.FormatUint(meta.Index, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, tmp)
}

// snapshotRestore serves PUT|POST /v1/operator/snapshot: the body is an
// archive; the servers verify all of it before anything changes, then
// replace the cluster's whole state through Raft.
func (s *Server) snapshotRestore(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, nil); err != nil {
		s.writeError(w, r, err)
		return
	}
	token, err := requestToken(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.api.SnapshotRestore(r.Context(), r.Body, api.SnapshotOptions{Token: token}); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"restored": true})
}

// snapshotInspect serves POST /v1/operator/snapshot/inspect: the body is
// an archive, verified and counted here (its metadata and records per
// table); nothing is sent to the servers.
func (s *Server) snapshotInspect(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, nil); err != nil {
		s.writeError(w, r, err)
		return
	}
	ins, err := inspect.Archive(http.MaxBytesReader(w, r.Body, maxInspectBytes))
	if err != nil {
		s.writeError(w, r, structs.Invalid("archive", err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, ins)
}
