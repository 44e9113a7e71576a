package structs

// ServerInfo identifies one server for bootstrap-expect and joins.
type ServerInfo struct {
	ID   string // Raft server ID (stable, kept in the data dir)
	Name string // node name, for humans
	Addr string // the one RPC/Raft address, host:port
	// BootstrapExpect is the -bootstrap-expect the server was started with;
	// servers that disagree refuse to bootstrap together.
	BootstrapExpect int
	// HasState is true when the server's Raft log or snapshots are not empty:
	// it belongs to a cluster already and must never bootstrap a new one.
	HasState bool
}

// HelloRequest is sent by a server to a join address to exchange identities.
type HelloRequest struct {
	From ServerInfo
	// AuthToken is unused (a server certificate authenticates a hello);
	// it makes the request Authenticated like every other.
	AuthToken string
}

func (h *HelloRequest) Token() string     { return h.AuthToken }
func (h *HelloRequest) SetToken(t string) { h.AuthToken = t }

// HelloResponse tells the caller who the receiver is and whom it knows.
type HelloResponse struct {
	Self   ServerInfo
	Known  []ServerInfo
	Leader string // leader address, empty when none is known
}

// RaftServer is one member of the Raft configuration, as shown to operators.
type RaftServer struct {
	ID      string
	Node    string
	Address string
	Leader  bool
	Voter   bool
	// Version is the server's claimd build, as the answering server last
	// heard it (the leader asks every server every few seconds); empty
	// when unknown.
	Version string
}

// RaftConfigurationResponse lists the Raft members.
type RaftConfigurationResponse struct {
	Servers []RaftServer
	// Index is always 0: raft v1.7.3's GetConfiguration does not fill in
	// the configuration's index. Kept for the wire format; not shown.
	Index uint64
}

// RaftPeerRequest names a Raft member by ID or address.
type RaftPeerRequest struct {
	ID      string
	Address string
	WriteRequest
}

// RaftJoinRequest asks the leader to add a server as a voter.
type RaftJoinRequest struct {
	Server ServerInfo
	WriteRequest
}

// TransferLeadershipRequest moves leadership; an empty ID lets Raft pick.
type TransferLeadershipRequest struct {
	ID string
	WriteRequest
}

// StateDigest is a hash of a server's whole state machine, with the Raft
// index of the state that was hashed. Servers that applied the same log
// have the same digest (S2).
type StateDigest struct {
	// AppliedIndex is the Raft index of the last applied entry that
	// changed the hashed state (its newest table index), read from the
	// same frozen view as the hash: servers reporting the same one have
	// applied the same writes. It is not Raft's AppliedIndex, which runs
	// ahead of the state machine while the FSM goroutine catches up, and
	// which counts entries that change nothing. 0 only for an empty state.
	AppliedIndex uint64
	SHA256       string
	Bytes        int64
}

// RuntimeStats is a server process's own health, for operators and the
// chaos suite's leak checks.
type RuntimeStats struct {
	// PID is the server's operating-system process ID, so that a tool on
	// the same machine (claimd bench) can read the process's CPU time from
	// /proc. Zero from servers older than the field.
	PID        int
	Goroutines int
	HeapBytes  uint64
	// Security counters since the server started: calls refused by ACLs,
	// failed TLS handshakes, plaintext connections refused because TLS is
	// required.
	ACLDenied         uint64
	TLSHandshakeFails uint64
	PlaintextRefused  uint64
	OpeningRefused    uint64
	// RequestsRefused and StreamsRefused: RPC requests refused while being
	// read (a budget, the read deadline) and streams closed past a
	// session's stream limit.
	RequestsRefused uint64
	StreamsRefused  uint64
	// QueriesWaiting is how many blocking queries wait for a change on
	// this server now.
	QueriesWaiting int64
	// QueriesRefused: reads refused past a limit on reads in flight
	// (running, waiting for a change, or their answer not yet written); RegistrationsRefused: new nodes refused past their client
	// certificate's rate or cap. Zero from servers older than the fields.
	QueriesRefused       uint64
	RegistrationsRefused uint64
}
