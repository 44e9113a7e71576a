package endpoints

import (
	netrpc "net/rpc"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/attachment"
	"github.com/claimd/claimd/forward"
	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
	"github.com/claimd/claimd/watcher"
)

// Server is what the endpoints need from a claimd server. The server package
// implements it; tests may too.
type Server interface {
	// Forward is forward-or-serve (see package forward).
	Forward(method string, info structs.RPCInfo, args, reply any) (bool, error)
	// WaitConsistentReads returns once this server may serve a consistent
	// (not stale) read: it leads and has applied everything committed
	// before it won. Otherwise no_leader.
	WaitConsistentReads() error
	// Apply commits one log entry and returns what the FSM returned; a
	// request the FSM refused comes back as err.
	Apply(t structs.MessageType, msg any) (resp any, index uint64, err error)
	// State is the current state store (it changes on snapshot restore).
	State() *fsm.StateStore
	// FSM is the state machine (for digests).
	FSM() *fsm.FSM
	Raft() *raft.Raft
	Logger() hclog.Logger
	// Self describes this server.
	Self() structs.ServerInfo
	// Hello records a peer's identity for bootstrap-expect and answers
	// with what this server knows.
	Hello(req *structs.HelloRequest) *structs.HelloResponse
	// ServerName maps a Raft server ID to its node name ("" if unknown).
	ServerName(id string) string
	ShutdownCh() <-chan struct{}
	// SubmitClaim commits one claim or release, batched with concurrent
	// ones into a single claim batch entry.
	SubmitClaim(req *structs.VolumeClaimRequest) (*structs.ClaimResult, uint64, error)
	// HeartbeatTTL is how soon a node must heartbeat again.
	HeartbeatTTL() time.Duration
	// NodeRouter delivers calls to client nodes over their sessions.
	NodeRouter() *forward.NodeRouter
	// Watcher is the leader's release worker; Heartbeats its node timers.
	Watcher() *watcher.Watcher
	Heartbeats() *watcher.Heartbeats
	// Attachments keeps the controller attachments: publish, the (volume,
	// node) locks, controller target choice and node calls.
	Attachments() *attachment.Manager
	// ACLEnabled reports whether this server checks ACL tokens.
	ACLEnabled() bool
	// Tokens resolves ACL tokens (with a per-server cache).
	Tokens() *TokenResolver
	// Security counts refused connections and calls.
	Security() *SecurityCounters
	// BarrierPending reports whether this server leads but has not yet
	// applied everything committed before it won.
	BarrierPending() bool
	// ACLResetIndex is the index an operator wrote to acl-bootstrap-reset
	// in this server's data dir (0 if none): see ACL.Bootstrap.
	ACLResetIndex() uint64
	// RaftHealth is the leader's autopilot view of every server (no_leader
	// on a server that does not lead).
	RaftHealth() (*structs.RaftHealthResponse, error)
}

// ConnInfo describes the connection a call arrived on: Session is the
// yamux session for ProtoMux connections, nil otherwise; TLS and Role say
// whether it was TLS and what the peer's certificate names it; Remote is
// the peer address (log lines, and migration mode's Raft member test).
type ConnInfo struct {
	Session *yamux.Session
	TLS     bool
	Role    tlsutil.Role
	Remote  string
	// ServerTLS: this server has TLS configured, so a plaintext
	// connection is only there by -tls-allow-plaintext (migration mode),
	// and gets nothing a migration does not need.
	ServerTLS bool
}

// Receivers are the RPC receivers of one connection, by service name.
func Receivers(srv Server, conn ConnInfo) map[string]any {
	auth := &authz{srv: srv, conn: conn}
	return map[string]any{
		"Status":    &Status{srv: srv, auth: auth},
		"Operator":  &Operator{srv: srv, auth: auth},
		"Volume":    &Volume{srv: srv, auth: auth},
		"Node":      &Node{srv: srv, conn: conn, auth: auth},
		"ClientCSI": &ClientCSI{srv: srv, auth: auth},
		"System":    &System{srv: srv, auth: auth},
		"Alloc":     &Alloc{srv: srv, auth: auth},
		"Plugin":    &Plugin{srv: srv, auth: auth},
		"Eval":      &Eval{srv: srv, auth: auth},
		"ACL":       &ACL{srv: srv, auth: auth},
	}
}

// Register adds every endpoint to rs.
func Register(rs *netrpc.Server, srv Server, conn ConnInfo) error {
	for name, rcvr := range Receivers(srv, conn) {
		if err := rs.RegisterName(name, rcvr); err != nil {
			return err
		}
	}
	return nil
}
