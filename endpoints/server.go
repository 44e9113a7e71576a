package endpoints

import (
	"context"
	"github.com/claimd/claimd/leaderlease"
	netrpc "net/rpc"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// The endpoints see the rest of the server through a few small roles,
// each implemented by the package that owns it, collected once in Deps
// when the server starts (server.New). A unit test builds a Deps from
// fakes of the roles it needs.

// Forwarder decides whether this server serves a call or the leader does,
// and sends it there (forward.Forwarder).
type Forwarder interface {
	Forward(method string, info structs.RPCInfo, args, reply any) (bool, error)
}

// Writer commits log entries (the server, over Raft and its batchers).
type Writer interface {
	// Apply commits one log entry and returns what the FSM returned; a
	// request the FSM refused comes back as err.
	Apply(t structs.MessageType, msg any) (resp any, index uint64, err error)
	// SubmitClaim commits one claim or release, batched with concurrent
	// ones into a single claim batch entry.
	SubmitClaim(req *structs.VolumeClaimRequest) (*structs.ClaimResult, uint64, error)
}

// Reader reads the replicated state (the server).
type Reader interface {
	// State is the current state store (it changes on snapshot restore).
	State() *fsm.StateStore
	// FSM is the state machine (for digests).
	FSM() *fsm.FSM
	// WaitConsistentReads returns once this server may serve a
	// consistent (not stale) read: it leads and has applied everything
	// committed before it won. Otherwise no_leader.
	WaitConsistentReads() error
	// BarrierPending reports whether this server leads but has not yet
	// applied everything committed before it won.
	BarrierPending() bool
}

// Cluster is this server's place in the cluster (the server).
type Cluster interface {
	// IsLeader reports whether this server leads now.
	IsLeader() bool
	// VerifyLeader returns nil once a quorum has confirmed, after the
	// call began, that this server still leads: what a lease renewal
	// needs (decision 39).
	VerifyLeader() error
	// LeaderContact says whether a leader is known and how long ago this
	// server heard from it (0 on the leader).
	LeaderContact() (known bool, lastContact time.Duration)
	// ServerAddrs lists the Raft members' addresses from this server's
	// view (what client agents fail over to).
	ServerAddrs() []string
	// RaftMemberHost reports whether remote (host:port) is on the host of
	// a server in the Raft configuration.
	RaftMemberHost(remote string) bool
	// ServerName maps a Raft server ID to its node name ("" if unknown).
	ServerName(id string) string
	// ServerVersion is a Raft server's claimd build as this server last
	// heard it ("" if unknown; a leader asks every server every few
	// seconds).
	ServerVersion(id string) string
	// AllServersSupport reports whether every server in the Raft
	// configuration, this one included, has told this leader it applies
	// the entry features f (structs.Feature*): false on a follower and
	// for a server not heard from yet.
	AllServersSupport(f uint64) bool
	// Hello records a peer's identity for bootstrap-expect and answers
	// with what this server knows.
	Hello(req *structs.HelloRequest) *structs.HelloResponse
	// RaftHealth is the leader's autopilot view of every server (no_leader
	// on a server that does not lead).
	RaftHealth() (*structs.RaftHealthResponse, error)
	// HeartbeatTTL is how soon a node must heartbeat again.
	HeartbeatTTL() time.Duration
	// ACLEnabled reports whether this server checks ACL tokens.
	ACLEnabled() bool
	// ACLResetIndex is the index an operator wrote to acl-bootstrap-reset
	// in this server's data dir (0 if none): see ACL.Bootstrap.
	ACLResetIndex() uint64
	ShutdownCh() <-chan struct{}
	// Raft is the Raft node, for the operator and status endpoints that
	// read or change the membership itself.
	Raft() *raft.Raft
}

// NodeSessions knows which client node's session is on this server
// (forward.NodeRouter).
type NodeSessions interface {
	// Bind makes sess the node's session: the servers call the node on it.
	Bind(nodeID string, sess *yamux.Session)
	// HasConn answers Status.HasNodeConn.
	HasConn(nodeID string) structs.NodeConnResponse
}

// HeartbeatTimers are the leader's per-node heartbeat deadlines
// (watcher.Heartbeats).
type HeartbeatTimers interface {
	Reset(nodeID string)
	// Received restarts the node's timer and its lease clock from at,
	// when the heartbeat was received.
	Received(nodeID string, at time.Time)
	Remove(nodeID string)
}

// Releases is the leader's release worker (watcher.Watcher).
type Releases interface {
	// Status is the retry state of every volume being released.
	Status() map[string]structs.ReleaseStatus
	// RunClaimGC runs the claim GC now and returns how many evals it made.
	RunClaimGC(ctx context.Context) (int, error)
	// RetryNode retries at once the releases waiting on a node.
	RetryNode(nodeID string)
}

// Attachments keeps the controller attachments (attachment.Manager).
type Attachments interface {
	Publish(claim *structs.Claim, record func(publishContext map[string]string) error, release func()) (*structs.Claim, error)
	ControllerCall(method string, q *structs.CSIControllerQuery, routing *structs.NodeRouting, args, reply any, answered func(node string)) error
	// NodeDetach with a nil grant: one is begun for the call (decision 46).
	NodeDetach(*leaderlease.Grant, *structs.ClientCSINodeDetachRequest, *structs.ClientCSINodeDetachResponse) error
	NodeExpand(*structs.ClientCSINodeExpandRequest, *structs.ClientCSINodeExpandResponse) error
	NodeStats(*structs.ClientCSINodeStatsRequest, *structs.ClientCSINodeStatsResponse) error
	NodeHeld(*structs.ClientCSINodeHeldRequest, *structs.ClientCSINodeHeldResponse) error
}

// Deps is everything the endpoints use of the rest of the server.
type Deps struct {
	Forwarder
	Writer
	Reader
	Cluster
	Sessions    NodeSessions
	Heartbeats  HeartbeatTimers
	Releases    Releases
	Attachments Attachments
	Reconciler  Reconciler
	// Tokens resolves ACL tokens (with a per-server cache); Security
	// counts refused connections and calls. Both live in this package.
	Tokens   *TokenResolver
	Security *SecurityCounters
	Logger   hclog.Logger
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
	// PeerCert is the hex SHA-256 of the peer's TLS leaf certificate (""
	// without TLS): with Remote's IP it names the peer for the RPC port's
	// per-peer limits (rpc/peers.go), and alone the certificate that
	// per-certificate limits count by (register_limits.go).
	PeerCert string
}

// Receivers are the RPC receivers of one connection, by service name.
func Receivers(srv *Deps, conn ConnInfo) map[string]any {
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
func Register(rs *netrpc.Server, srv *Deps, conn ConnInfo) error {
	for name, rcvr := range Receivers(srv, conn) {
		if err := rs.RegisterName(name, rcvr); err != nil {
			return err
		}
	}
	return nil
}
