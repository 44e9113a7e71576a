package structs

import "time"

// QueryOptions is embedded in every read request.
type QueryOptions struct {
	// Region-less: claimd has one cluster. AllowStale lets any server answer
	// from its local state instead of forwarding to the leader.
	AllowStale bool
	// MinQueryIndex makes a read block until the state index passes it
	// (a blocking query), or MaxQueryTime passes.
	MinQueryIndex uint64
	MaxQueryTime  time.Duration
	// Forwarded is set by a server that forwarded the request, so that the
	// receiver never forwards it again (one hop at most).
	Forwarded bool
	// AuthToken is the caller's credential: an ACL token's secret ID, or a
	// client agent's node secret. Forwarded unchanged; never logged.
	AuthToken string
	// Origin is the connection the request entered the cluster on, set by
	// the server that received it before forwarding (see CallOrigin).
	Origin CallOrigin
}

func (q *QueryOptions) IsRead() bool            { return true }
func (q *QueryOptions) AllowStaleRead() bool    { return q.AllowStale }
func (q *QueryOptions) IsForwarded() bool       { return q.Forwarded }
func (q *QueryOptions) SetForwarded(f bool)     { q.Forwarded = f }
func (q *QueryOptions) Token() string           { return q.AuthToken }
func (q *QueryOptions) SetToken(t string)       { q.AuthToken = t }
func (q *QueryOptions) CallOrigin() *CallOrigin { return &q.Origin }

// WriteRequest is embedded in every write request.
type WriteRequest struct {
	Forwarded bool
	// AuthToken: see QueryOptions.AuthToken.
	AuthToken string
	// Origin: see QueryOptions.Origin.
	Origin CallOrigin
}

func (w *WriteRequest) IsRead() bool            { return false }
func (w *WriteRequest) AllowStaleRead() bool    { return false }
func (w *WriteRequest) IsForwarded() bool       { return w.Forwarded }
func (w *WriteRequest) SetForwarded(f bool)     { w.Forwarded = f }
func (w *WriteRequest) Token() string           { return w.AuthToken }
func (w *WriteRequest) SetToken(t string)       { w.AuthToken = t }
func (w *WriteRequest) CallOrigin() *CallOrigin { return &w.Origin }

// RPCInfo is what the forwarding layer needs to know about a request.
type RPCInfo interface {
	IsRead() bool
	AllowStaleRead() bool
	IsForwarded() bool
	SetForwarded(bool)
	// CallOrigin is where the request entered the cluster.
	CallOrigin() *CallOrigin
	Authenticated
}

// CallOrigin describes the connection a request entered the cluster on:
// whether it was TLS and the role its certificate names ("server",
// "client", "cli" or ""). The server that receives a request from its
// caller overwrites it with what it saw; a server serving a forwarded
// request believes it only when the request came from a server's TLS
// connection, and then authorizes the original caller with it, never the
// forwarding server (decision 37).
type CallOrigin struct {
	TLS  bool
	Role string
	// PeerCert is the SHA-256 (hex) of the entry connection's leaf
	// certificate ("" without TLS): what per-certificate limits count by
	// (new-node registrations, endpoints/register_limits.go). Not a secret.
	PeerCert string
}

// Authenticated is a request that carries the caller's credential. Clients
// (the api package, client agents) fill it in through SetToken when it is
// empty; servers read it after forwarding.
type Authenticated interface {
	Token() string
	SetToken(string)
}

// QueryMeta is embedded in every read response.
type QueryMeta struct {
	// Index is the Raft index of the newest change to what was read; pass it
	// as MinQueryIndex to wait for the next change.
	Index uint64
	// KnownLeader is false when the answering server had no leader (only
	// possible for stale reads).
	KnownLeader bool
	// LastContact is how long ago the answering server heard from the leader
	// (0 on the leader itself).
	LastContact time.Duration
}

// WriteMeta is embedded in every write response.
type WriteMeta struct {
	// Index is the Raft index at which the write was committed.
	Index uint64
}

// GenericRequest is a read with no arguments.
type GenericRequest struct {
	QueryOptions
}

// GenericResponse is a write with no result beyond its index.
type GenericResponse struct {
	WriteMeta
}

// EmptyArgs is for Status calls that take nothing but the caller's
// credential.
type EmptyArgs struct {
	AuthToken string
}

func (e *EmptyArgs) Token() string     { return e.AuthToken }
func (e *EmptyArgs) SetToken(t string) { e.AuthToken = t }

// Blocking query bounds. A query without MaxQueryTime waits the default; no
// query waits longer than the maximum, so a lost caller costs a bounded time.
const (
	DefaultQueryTime = 5 * time.Minute
	MaxQueryTime     = 10 * time.Minute
)

// QueryWait is how long a blocking query may wait at the server.
func (q *QueryOptions) QueryWait() time.Duration {
	if q.MinQueryIndex == 0 {
		return 0
	}
	if q.MaxQueryTime <= 0 {
		return DefaultQueryTime
	}
	if q.MaxQueryTime > MaxQueryTime {
		return MaxQueryTime
	}
	return q.MaxQueryTime
}
