package httpapi

import (
	"net/http"
	"time"

	"github.com/claimd/claimd/structs"
)

// GET /v1/status/leader: the leader's RPC address as the answering server
// knows it ("" while there is none).
func (s *Server) statusLeader(w http.ResponseWriter, r *http.Request) (any, error) {
	var out string
	err := s.rpc(r, "Status.Leader", &structs.EmptyArgs{}, &out)
	return out, err
}

// GET /v1/status/peers: the Raft voters' addresses.
func (s *Server) statusPeers(w http.ResponseWriter, r *http.Request) (any, error) {
	var out []string
	err := s.rpc(r, "Status.Peers", &structs.EmptyArgs{}, &out)
	return orEmpty(out), err
}

// raftServer and raftConfiguration are structs.RaftConfigurationResponse
// with JSON names like the rest of the API.
type raftServer struct {
	ID      string `json:"id"`
	Node    string `json:"node"`
	Address string `json:"address"`
	Leader  bool   `json:"leader"`
	Voter   bool   `json:"voter"`
	// Version is the server's build as the answering server last heard
	// it; empty when unknown.
	Version string `json:"version,omitempty"`
}

// raftConfiguration has no index: the Raft library (v1.7.3) does not
// report the configuration entry's index, and the constant 0 it gives
// only misled (issue 30).
type raftConfiguration struct {
	Servers []raftServer `json:"servers"`
}

// GET /v1/operator/raft/configuration[?stale]: what `claimd operator raft
// list-peers` shows.
func (s *Server) raftConfiguration(w http.ResponseWriter, r *http.Request) (any, error) {
	stale, err := flagParam(r, "stale")
	if err != nil {
		return nil, err
	}
	var out structs.RaftConfigurationResponse
	args := &structs.GenericRequest{QueryOptions: structs.QueryOptions{AllowStale: stale}}
	if err := s.rpc(r, "Operator.RaftGetConfiguration", args, &out); err != nil {
		return nil, err
	}
	res := raftConfiguration{Servers: []raftServer{}}
	for _, sv := range out.Servers {
		res.Servers = append(res.Servers, raftServer{ID: sv.ID, Node: sv.Node, Address: sv.Address, Leader: sv.Leader, Voter: sv.Voter, Version: sv.Version})
	}
	return res, nil
}

// DELETE /v1/operator/raft/peer?id=ID (or ?address=HOST:PORT)
func (s *Server) raftRemovePeer(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	var out structs.GenericResponse
	if err := s.rpc(r, "Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: q.Get("id"), Address: q.Get("address")}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}

// PUT|POST /v1/operator/raft/transfer-leader[?id=ID] (no id: Raft picks).
func (s *Server) raftTransferLeader(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.GenericResponse
	if err := s.rpc(r, "Operator.TransferLeadership", &structs.TransferLeadershipRequest{ID: r.URL.Query().Get("id")}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}

// gcResult is `claimd system gc`'s answer.
type gcResult struct {
	EvalsCreated int    `json:"evals_created"`
	Index        uint64 `json:"index"`
}

// PUT|POST /v1/system/gc
func (s *Server) systemGC(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.SystemGCResponse
	if err := s.rpc(r, "System.GarbageCollect", &structs.SystemGCRequest{}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return gcResult{EvalsCreated: out.EvalsCreated, Index: out.Index}, nil
}

// releaseStatus is structs.ReleaseStatus with JSON names.
type releaseStatus struct {
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error"`
	NextTry   time.Time `json:"next_try"`
	// LeaseExpiresAt: a release waiting for a lost node's lease (fence).
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
}

// GET /v1/system/release-status: the leader's retry state of releases
// that failed at least once, by volume ID (what `claimd eval list` and
// `claimd volume status` show beside past claims).
func (s *Server) releaseStatus(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.ReleaseStatusResponse
	if err := s.rpc(r, "System.ReleaseStatus", &structs.ReleaseStatusRequest{}, &out); err != nil {
		return nil, err
	}
	res := make(map[string]releaseStatus, len(out.Volumes))
	for id, st := range out.Volumes {
		res[id] = releaseStatus{Attempts: st.Attempts, LastError: st.LastError, NextTry: st.NextTry, LeaseExpiresAt: st.LeaseExpiresAt}
	}
	return res, nil
}

// GET /v1/operator/raft/health: each server's last contact with the
// leader, index lag and verdict (autopilot's view, on the leader). 200
// when every server is healthy, 429 when the cluster answers but is not
// (as Consul does, so a check can tell "unhealthy" from "unreachable").
func (s *Server) raftHealth(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.RaftHealthResponse
	if err := s.rpc(r, "Operator.RaftHealth", &structs.GenericRequest{}, &out); err != nil {
		return nil, err
	}
	if !out.Healthy {
		return withStatus{status: http.StatusTooManyRequests, body: out}, nil
	}
	return out, nil
}
