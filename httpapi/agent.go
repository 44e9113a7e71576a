package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/version"
)

// DefaultMaxApplyLag is how many committed entries a healthy server may
// not have applied yet. A server applies within milliseconds of a commit
// (hundreds of entries behind at most, at the benchmarks' peak); thousands
// mean its state machine cannot keep up, and everything it answers,
// stale reads above all, is old.
const DefaultMaxApplyLag = 1000

// health is GET /v1/agent/health's answer.
type health struct {
	OK bool `json:"ok"`
	// Reason says why not OK: each failing part's reasons.
	Reason string        `json:"reason,omitempty"`
	Role   string        `json:"role"`
	Server *serverHealth `json:"server,omitempty"`
	Client *clientHealth `json:"client,omitempty"`
}

type serverHealth struct {
	OK           bool   `json:"ok"`
	Reason       string `json:"reason,omitempty"`
	RaftState    string `json:"raft_state"`
	Leader       string `json:"leader"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// LastContact is how long ago a follower heard from the leader ("0s"
	// on the leader, "never" before any contact).
	LastContact string `json:"last_contact"`
}

type clientHealth struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
	// ServerSession: connected to a server that accepted the node's last
	// heartbeat.
	ServerSession bool                    `json:"server_session"`
	Plugins       map[string]pluginHealth `json:"plugins"`
}

type pluginHealth struct {
	Healthy     bool   `json:"healthy"`
	Description string `json:"description,omitempty"`
}

// GET /v1/agent/health: 200 when this agent is fit to serve, 503 with the
// reason otherwise. No token: load balancers call it. It makes no RPC:
// the answer is this agent's own view, so it works while it is cut off.
func (s *Server) agentHealth(w http.ResponseWriter, r *http.Request) (any, error) {
	h := health{OK: true, Role: s.role()}
	var reasons []string
	if s.cfg.Server != nil {
		h.Server = checkServer(s.cfg.Server.Raft(), s.cfg.MaxApplyLag)
		if !h.Server.OK {
			reasons = append(reasons, "server: "+h.Server.Reason)
		}
	}
	if s.cfg.Client != nil {
		h.Client = checkClient(s.cfg.Client)
		if !h.Client.OK {
			reasons = append(reasons, "client: "+h.Client.Reason)
		}
	}
	if len(reasons) > 0 {
		h.OK, h.Reason = false, strings.Join(reasons, "; ")
		return withStatus{http.StatusServiceUnavailable, h}, nil
	}
	return h, nil
}

func checkServer(r *raft.Raft, maxLag uint64) *serverHealth {
	state := r.State()
	addr, _ := r.LeaderWithID()
	h := &serverHealth{
		OK: true, RaftState: state.String(), Leader: string(addr),
		// CommitIndex and AppliedIndex are atomic reads; Stats would wait
		// for Raft's main loop, which a health check must not.
		CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(),
		LastContact: "never",
	}
	switch last := r.LastContact(); {
	case state == raft.Leader:
		h.LastContact = "0s"
	case !last.IsZero():
		h.LastContact = time.Since(last).Round(time.Millisecond).String()
	}
	switch {
	case state == raft.Shutdown:
		h.OK, h.Reason = false, "Raft is shut down"
	case addr == "":
		h.OK, h.Reason = false, "no known leader"
	case h.CommitIndex > h.AppliedIndex+maxLag:
		h.OK, h.Reason = false, fmt.Sprintf("applied index %d is %d entries behind commit index %d (more than %d)",
			h.AppliedIndex, h.CommitIndex-h.AppliedIndex, h.CommitIndex, maxLag)
	}
	return h
}

func checkClient(c ClientSource) *clientHealth {
	ch := c.Health()
	h := &clientHealth{OK: true, ServerSession: ch.ServerSession, Plugins: map[string]pluginHealth{}}
	var reasons []string
	if !ch.ServerSession {
		reasons = append(reasons, "no server session (no server accepted the node's last heartbeat)")
	}
	for _, id := range structs.SortedKeys(ch.Plugins) {
		p := ch.Plugins[id]
		h.Plugins[id] = pluginHealth{Healthy: p.Healthy, Description: p.Description}
		if !p.Healthy {
			reasons = append(reasons, fmt.Sprintf("plugin %q unhealthy: %s", id, p.Description))
		}
	}
	if len(reasons) > 0 {
		h.OK, h.Reason = false, strings.Join(reasons, "; ")
	}
	return h
}

// role is what this agent runs.
func (s *Server) role() string {
	switch {
	case s.cfg.Server != nil && s.cfg.Client != nil:
		return "both"
	case s.cfg.Server != nil:
		return "server"
	case s.cfg.Client != nil:
		return "client"
	}
	return "none"
}

// Self is GET /v1/agent/self's answer.
type Self struct {
	// Version of the claimd binary (Version() when empty).
	Version string `json:"version"`
	// Role is server, client or both; filled in from Config when empty.
	Role     string `json:"role"`
	ServerID string `json:"server_id,omitempty"`
	NodeID   string `json:"node_id,omitempty"`
	// Config is the agent's configuration with every secret redacted by
	// whoever fills it in: token values, key file contents, commands (a
	// fence command line may carry a credential). It is answered without
	// a token, so nothing in it may be one.
	Config any `json:"config"`
}

// GET /v1/agent/self: version, role and the redacted configuration. No
// token, like health.
func (s *Server) agentSelf(w http.ResponseWriter, r *http.Request) (any, error) {
	self := s.cfg.Self
	if self.Role == "" {
		self.Role = s.role()
	}
	return self, nil
}

// Version is this binary's version and commit (package version).
func Version() string { return version.Short() }
