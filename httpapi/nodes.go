package httpapi

import (
	"net/http"

	"github.com/claimd/claimd/structs"
)

// drainResult is POST /v1/node/{id}/drain's answer: the plan, and the
// index the drain started at (0 for a dry run).
type drainResult struct {
	Plan  *structs.DrainPlan `json:"plan"`
	Index uint64             `json:"index"`
}

// POST /v1/node/{id}/drain[?dry-run]: what `claimd node drain` does
// before it waits (the route starts the drain; GET follows it).
func (s *Server) nodeDrain(w http.ResponseWriter, r *http.Request) (any, error) {
	dry, err := flagParam(r, "dry-run")
	if err != nil {
		return nil, err
	}
	var out structs.NodeDrainResponse
	if err := s.rpc(r, "Node.Drain", &structs.NodeDrainRequest{NodeID: r.PathValue("id"), DryRun: dry}, &out); err != nil {
		return nil, err
	}
	if !dry {
		setWriteIndex(w, out.Index)
	}
	return drainResult{Plan: out.Plan, Index: out.Index}, nil
}

// GET /v1/node/{id}/drain: the drain's progress (blocking with ?index=).
func (s *Server) nodeDrainStatus(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.NodeDrainStatusResponse
	if err := s.rpc(r, "Node.DrainStatus", &structs.NodeDrainStatusRequest{NodeID: r.PathValue("id"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Status, nil
}

// eligibilityResult is POST /v1/node/{id}/eligibility's answer.
type eligibilityResult struct {
	Eligibility structs.NodeEligibility `json:"eligibility"`
	Index       uint64                  `json:"index"`
}

// POST /v1/node/{id}/eligibility?eligible=true|false: `claimd node
// eligibility -enable|-disable`.
func (s *Server) nodeEligibility(w http.ResponseWriter, r *http.Request) (any, error) {
	if !r.URL.Query().Has("eligible") {
		return nil, structs.Invalid("eligible", "required: ?eligible=true or ?eligible=false")
	}
	eligible, err := flagParam(r, "eligible")
	if err != nil {
		return nil, err
	}
	e := structs.NodeIneligible
	if eligible {
		e = structs.NodeEligible
	}
	var out structs.NodeEligibilityResponse
	if err := s.rpc(r, "Node.UpdateEligibility", &structs.NodeEligibilityRequest{NodeID: r.PathValue("id"), Eligibility: e}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return eligibilityResult{Eligibility: e, Index: out.Index}, nil
}

// POST /v1/node/{id}/purge: `claimd node purge`, a management token's.
// The answer lists the claims the node still holds and says they wait for
// `volume detach -force`.
func (s *Server) nodePurge(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.NodePurgeResponse
	if err := s.rpc(r, "Node.Purge", &structs.NodePurgeRequest{NodeID: r.PathValue("id")}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return &out, nil
}

// deregisterResult is POST /v1/node/{id}/deregister's answer.
type deregisterResult struct {
	NodeID string `json:"node_id"`
	Index  uint64 `json:"index"`
}

// POST /v1/node/{id}/deregister: `claimd node deregister`.
func (s *Server) nodeDeregister(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.GenericResponse
	id := r.PathValue("id")
	if err := s.rpc(r, "Node.Deregister", &structs.NodeDeregisterRequest{NodeIDs: []string{id}}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return deregisterResult{NodeID: id, Index: out.Index}, nil
}
