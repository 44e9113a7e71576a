package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/claimd/claimd/leaderlease"
	"net"
	netrpc "net/rpc"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/attachment"
	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/forward"
	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/raftnode"
	"github.com/claimd/claimd/reconcile"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/version"
	"github.com/claimd/claimd/watcher"
)

// Server is one claimd server.
type Server struct {
	cfg    Config
	logger hclog.Logger
	id     string
	addr   string
	// holderDetachOpen: the last answer of AllServersSupport for
	// FeatureHolderDetached, to log when it changes.
	holderDetachOpen atomic.Bool

	listener net.Listener
	stream   *raftnode.StreamLayer
	raft     *raftnode.Node
	fsm      *fsm.FSM
	observed *observedFSM
	pool     *forward.Pool
	fwd      *forward.Forwarder
	nodes    *forward.NodeRouter
	watcher  *watcher.Watcher
	// reconciler compares the storage with the record (issue 27).
	reconciler *reconcile.Reconciler
	beats      *watcher.Heartbeats
	fenceAlarm fenceAlarm // fence_alarm.go
	attach     *attachment.Manager
	// lease is the storage lease: storage calls only within it (decision 46).
	lease *leaderlease.Lease
	// limits is this server's share of the RPC port's limits.
	limits *rpcLimits
	// deps is what the endpoints see of this server, collected once.
	deps *endpoints.Deps
	// autopilot checks Raft health and removes dead servers while leading.
	autopilot *autopilotDuty

	// leaderChanged is closed and replaced at every leadership change this
	// server observes, waking requests held for a leader.
	leaderMu      sync.Mutex
	leaderChanged chan struct{}

	// readsReady is closed while this server leads with its barrier done
	// (consistent reads may be served); replaced when leadership is lost.
	readsMu    sync.Mutex
	readsReady chan struct{}

	boot        *bootstrapper
	leaving     atomic.Bool // Leave was called: stay out of the configuration
	claims      *batcher[*structs.VolumeClaimRequest, *structs.ClaimResult]
	checkpoints *batcher[*structs.ClaimCheckpointRequest, *structs.CheckpointResult]

	// leaderDuties are switched on after this server wins leadership and
	// its Barrier completes, and off when it loses leadership.
	dutiesMu     sync.Mutex
	leaderDuties []LeaderDuty

	connsMu sync.Mutex
	conns   map[net.Conn]struct{}
	// openSlots holds one token per connection still opening, and
	// openingByIP counts them per remote IP (listener.go).
	openSlots          chan struct{}
	openingMu          sync.Mutex
	openingByIP        map[string]int
	lastOpenRefusalLog atomic.Int64

	tokens   *endpoints.TokenResolver
	security endpoints.SecurityCounters

	shutdownOnce sync.Once
	shutdownCh   chan struct{}
	wg           sync.WaitGroup
}

// LeaderDuty is work only the leader does (watchers, timers).
// SetEnabled(true) is called once leadership is established, after a
// Barrier; SetEnabled(false) when it is lost or the server stops. Calls come
// from one goroutine and must not block for long.
type LeaderDuty interface {
	SetEnabled(enabled bool)
}

// New starts a server: listener, Raft, endpoints, and the join loop.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RaftMultiplier <= 0 {
		cfg.RaftMultiplier = 1
	}
	if cfg.JoinInterval <= 0 {
		cfg.JoinInterval = time.Second
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	id, err := loadOrCreateID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.NodeName == "" {
		cfg.NodeName = defaultNodeName(id)
	}
	s := &Server{
		cfg:           cfg,
		logger:        cfg.Logger.Named("server"),
		id:            id,
		leaderChanged: make(chan struct{}),
		readsReady:    make(chan struct{}),
		conns:         map[net.Conn]struct{}{},
		openSlots:     make(chan struct{}, maxOpening),
		openingByIP:   map[string]int{},
		tokens:        endpoints.NewTokenResolver(),
		limits:        newRPCLimits(),
		shutdownCh:    make(chan struct{}),
	}
	// Every outgoing connection (Raft, forwarding, node calls, joins) is
	// TLS when TLS is on.
	dial := cfg.Dialer
	if cfg.TLS != nil {
		dial = rpc.TLSDialer(cfg.Dialer, cfg.TLS.OutgoingConfig, cfg.TLSAllowPlaintext)
	}
	s.listener = cfg.Listener
	if s.listener == nil {
		if s.listener, err = net.Listen("tcp", cfg.BindAddr); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", cfg.BindAddr, err)
		}
	}
	s.addr = cfg.AdvertiseAddr
	if s.addr == "" {
		s.addr = s.listener.Addr().String()
	}
	advertise, err := net.ResolveTCPAddr("tcp", s.addr)
	if err != nil {
		s.listener.Close()
		return nil, fmt.Errorf("advertise address %q: %w", s.addr, err)
	}

	s.fsm = fsm.New(cfg.Logger.Named("fsm"))
	s.observed = &observedFSM{FSM: s.fsm, beforeApply: cfg.BeforeApply}
	s.stream = raftnode.NewStreamLayer(advertise, dial)
	s.raft, err = raftnode.New(raftnode.Config{
		ID:                id,
		DataDir:           cfg.DataDir,
		Multiplier:        cfg.RaftMultiplier,
		LogStore:          cfg.RaftLogStore,
		SnapshotThreshold: cfg.SnapshotThreshold,
		TrailingLogs:      cfg.TrailingLogs,
		SnapshotInterval:  cfg.SnapshotInterval,
		WALSegmentSize:    cfg.WALSegmentSize,
		Stream:            s.stream,
		FSM:               s.observed,
		Logger:            cfg.Logger.Named("raft"),
	})
	if err != nil {
		s.listener.Close()
		return nil, err
	}
	s.observed.running.Store(true)
	s.pool = forward.NewPool(dial, s.logger)
	s.fwd = forward.New(s.pool, s, s.shutdownCh, s.serverToken)
	s.nodes = forward.NewNodeRouter(forward.NewNodeConns(), s.pool, s.otherServers, s.serverToken)
	s.boot = newBootstrapper(s)
	s.lease = leaderlease.New(cfg.StorageLease, s.confirmLeadership)
	s.claims = newBatcher("claim", s.commitClaims, s.shutdownCh)
	s.checkpoints = newBatcher("checkpoint", s.commitCheckpoints, s.shutdownCh)
	// One attachment keeper for the claim path's publishes and the
	// watcher's unpublishes alike.
	s.attach = attachment.New(s, s.nodes, s.lease, s.logger)
	s.watcher = watcher.New(watcher.Config{
		Workers: cfg.ReleaseWorkers, BackoffBase: cfg.ReleaseBackoffBase, BackoffMax: cfg.ReleaseBackoffMax,
		GCInterval: cfg.ClaimGCInterval, Logger: s.logger,
	}, s, s, s.attach)
	ttl := cfg.HeartbeatTTL
	if ttl <= 0 {
		ttl = DefaultHeartbeatTTL
	}
	s.beats = watcher.NewHeartbeats(s, s, ttl, ttl/2, s.logger)
	s.watcher.SetLeases(s.beats)
	s.reconciler = reconcile.New(s, s, s.attach, cfg.ReconcileInterval, s.logger)
	s.reconciler.SetRepairGrace(cfg.ReconcileRepairGrace)
	s.deps = &endpoints.Deps{
		Forwarder: s.fwd, Writer: s, Reader: s, Cluster: s,
		Sessions: s.nodes, Heartbeats: s.beats, Releases: s.watcher, Attachments: s.attach, Reconciler: s.reconciler,
		Tokens: s.tokens, Security: &s.security, Logger: s.logger,
	}
	s.AddLeaderDuty(s.watcher)
	s.AddLeaderDuty(s.beats)
	s.AddLeaderDuty(s.reconciler)
	s.autopilot = newAutopilotDuty(s)
	s.AddLeaderDuty(s.autopilot)

	observations := make(chan raft.Observation, 16)
	s.raft.Raft.RegisterObserver(raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))

	s.goFunc(func() { s.acceptLoop() })
	s.goFunc(func() { s.watchLeaderObservations(observations) })
	s.goFunc(func() { s.monitorLeadership() })
	s.goFunc(func() { s.boot.run() })
	s.goFunc(func() { s.claims.run() })
	s.goFunc(func() { s.checkpoints.run() })
	s.goFunc(func() { s.emitStats() })
	s.logger.Info("server started", "id", id, "name", cfg.NodeName, "addr", s.addr,
		"bootstrap_expect", cfg.BootstrapExpect, "had_state", s.raft.HadState(), "raft_log_store", s.raft.LogStore,
		"tls", cfg.TLS != nil, "tls_allow_plaintext", cfg.TLSAllowPlaintext, "acl", cfg.ACLEnabled)
	return s, nil
}

func (s *Server) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// loadOrCreateID keeps the server's Raft ID in the data dir so a restarted
// server is the same member.
// defaultNodeName is the host name and the start of the server's ID:
// unique per data dir and the same across restarts, so that several
// servers on one host (a test bed, a laptop) do not all show as the host
// in list-peers, the UI and snapshot metadata.
func defaultNodeName(id string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "server"
	}
	return host + "-" + id[:min(8, len(id))]
}

func loadOrCreateID(dir string) (string, error) {
	path := filepath.Join(dir, "server-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read server ID: %w", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	h := hex.EncodeToString(raw[:])
	id := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write server ID: %w", err)
	}
	return id, nil
}

// ID is the server's Raft ID.
func (s *Server) ID() string { return s.id }

// Addr is the advertised RPC address.
func (s *Server) Addr() string { return s.addr }

// Raft implements endpoints.Cluster.
func (s *Server) Raft() *raft.Raft { return s.raft.Raft }

// State implements endpoints.Reader.
func (s *Server) State() *fsm.StateStore { return s.fsm.State() }

// FSM exposes the state machine (tests compare snapshots).
func (s *Server) FSM() *fsm.FSM { return s.fsm }

// ShutdownCh implements endpoints.Cluster.
func (s *Server) ShutdownCh() <-chan struct{} { return s.shutdownCh }

// Pool is the server-to-server connection pool.
func (s *Server) Pool() *forward.Pool { return s.pool }

// Self describes this server for the bootstrap hello and joins.
func (s *Server) Self() structs.ServerInfo {
	return structs.ServerInfo{
		ID:              s.id,
		Name:            s.cfg.NodeName,
		Addr:            s.addr,
		BootstrapExpect: s.cfg.BootstrapExpect,
		HasState:        s.hasState(),
	}
}

func (s *Server) hasState() bool {
	return s.raft.HadState() || s.raft.Raft.LastIndex() > 0
}

// IsLeader implements endpoints.Cluster.
func (s *Server) IsLeader() bool { return s.raft.Raft.State() == raft.Leader }

// VerifyLeader implements endpoints.Cluster: a round of Raft heartbeats
// that a quorum must answer in this server's term.
func (s *Server) VerifyLeader() error {
	if err := s.raft.Raft.VerifyLeader().Error(); err != nil {
		return structs.Wrap(structs.ErrNoLeader, "leadership not confirmed: "+err.Error())
	}
	return nil
}

// LeaderContact implements endpoints.Cluster.
func (s *Server) LeaderContact() (known bool, lastContact time.Duration) {
	r := s.raft.Raft
	addr, _ := r.LeaderWithID()
	if r.State() == raft.Leader {
		return addr != "", 0
	}
	if last := r.LastContact(); !last.IsZero() {
		lastContact = time.Since(last)
	}
	return addr != "", lastContact
}

// ServerAddrs implements endpoints.Cluster: the Raft members' addresses
// from this server's view.
func (s *Server) ServerAddrs() []string {
	f := s.raft.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, srv := range f.Configuration().Servers {
		out = append(out, string(srv.Address))
	}
	return out
}

// RaftMemberHost implements endpoints.Cluster.
func (s *Server) RaftMemberHost(remote string) bool { return raftnode.MemberHost(s.raft.Raft, remote) }

// Leader implements forward.LeaderSource.
func (s *Server) Leader() (string, bool) {
	addr, id := s.raft.Raft.LeaderWithID()
	return string(addr), id != "" && string(id) == s.id && s.raft.Raft.State() == raft.Leader
}

// WriteRefusal implements forward.WriteRefuser: why this server's Raft
// log store refuses writes now (its disk is full), or nil.
func (s *Server) WriteRefusal() error { return s.raft.WriteRefusal() }

// LeaderChanged implements forward.LeaderSource.
func (s *Server) LeaderChanged() <-chan struct{} {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	return s.leaderChanged
}

func (s *Server) watchLeaderObservations(ch <-chan raft.Observation) {
	for {
		select {
		case <-ch:
			s.leaderMu.Lock()
			close(s.leaderChanged)
			s.leaderChanged = make(chan struct{})
			s.leaderMu.Unlock()
		case <-s.shutdownCh:
			return
		}
	}
}

// applyTimeout bounds how long an entry may wait to be enqueued.
const applyTimeout = 30 * time.Second

// maxEntryBytes keeps one entry well below what followers must hold in
// memory per AppendEntries batch.
const maxEntryBytes = 4 << 20

// Apply implements endpoints.Writer: encode, commit, and turn the FSM's
// answer into (response, index, error).
func (s *Server) Apply(t structs.MessageType, msg any) (any, uint64, error) {
	select {
	case <-s.shutdownCh:
		return nil, 0, structs.ErrShutdown
	default:
	}
	// The caller's credential has been checked; it is not part of what
	// the log records (the log and its copies on every server would keep
	// every token that ever wrote).
	if a, ok := msg.(structs.Authenticated); ok {
		a.SetToken("")
	}
	// Nor where the call entered (its CallOrigin): that decided who may
	// make the call, not what the state machine does with it.
	if o, ok := msg.(interface{ CallOrigin() *structs.CallOrigin }); ok {
		*o.CallOrigin() = structs.CallOrigin{}
	}
	buf, err := structs.Encode(t, msg)
	if err != nil {
		return nil, 0, structs.Invalid("request", err.Error())
	}
	if len(buf) > maxEntryBytes {
		return nil, 0, structs.NewError(structs.CodeTooLarge, fmt.Sprintf("entry is %d bytes, at most %d", len(buf), maxEntryBytes))
	}
	// The commit is also the proof of leadership a storage call needs
	// (decision 46): mark the moment before the append.
	mark := s.lease.Mark()
	f := s.raft.Raft.Apply(buf, applyTimeout)
	// Wait for the commit, but not past shutdown: an entry that can no
	// longer reach a quorum must not hold a stopping server (its leader
	// duties wait for their workers, which may be here).
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			err = endpoints.RaftError(err)
			// Leadership lost before the entry was taken: if it was lost
			// because this server's log store refuses writes (each
			// leadership it wins ends at its first append), say so.
			if errors.Is(err, structs.ErrNoLeader) {
				if why := s.raft.WriteRefusal(); why != nil {
					err = forward.NoLeaderRefusing(why)
				}
			}
			return nil, 0, err
		}
		s.lease.Confirmed(mark)
	case <-s.shutdownCh:
		return nil, 0, structs.ErrShutdown
	}
	resp := f.Response()
	if rerr, ok := resp.(error); ok {
		return nil, f.Index(), rerr
	}
	return resp, f.Index(), nil
}

// Hello implements endpoints.Cluster.
func (s *Server) Hello(req *structs.HelloRequest) *structs.HelloResponse {
	return s.boot.hello(req)
}

// ServerName implements endpoints.Cluster.
func (s *Server) ServerName(id string) string { return s.boot.name(id) }

// ServerVersion is a Raft server's build: this server's own, or the one
// another server gave in its last answer to this leader's health checks.
func (s *Server) ServerVersion(id string) string {
	if id == s.id {
		return version.Short()
	}
	return s.autopilot.versionOf(raft.ServerID(id))
}

// AllServersSupport implements endpoints.Cluster: only a leader knows
// (its health checks ask every server), and every member of the Raft
// configuration counts, voter or not. A server replaced by an older build
// after its last answer stops at the first such entry instead of
// diverging (the types carry no ignore flag).
func (s *Server) AllServersSupport(f uint64) bool {
	ok := s.allServersSupport(f)
	if f == structs.FeatureHolderDetached && s.holderDetachOpen.Swap(ok) != ok {
		if ok {
			s.logger.Info("every server applies the holder-detached entries: a release the holding node detached itself is recorded in its own entry")
		} else {
			s.logger.Info("not every server has reported the holder-detached entries (a server of an older build, or one not heard from yet): the servers drive every node detach")
		}
	}
	return ok
}

// featuresOf is a server's entry features as it last told this leader (this
// server's own: the build's).
func (s *Server) featuresOf(id raft.ServerID) uint64 {
	if string(id) == s.id {
		return structs.EntryFeatures
	}
	return s.autopilot.featuresOf(id)
}

func (s *Server) allServersSupport(f uint64) bool {
	if !s.IsLeader() {
		return false
	}
	fut := s.raft.Raft.GetConfiguration()
	if fut.Error() != nil {
		return false
	}
	for _, srv := range fut.Configuration().Servers {
		if s.featuresOf(srv.ID)&f != f {
			return false
		}
	}
	return true
}

// NodeRouter delivers calls to client nodes (tests inspect its sessions).
func (s *Server) NodeRouter() *forward.NodeRouter { return s.nodes }

// otherServers lists the other Raft members' addresses.
func (s *Server) otherServers() []string {
	f := s.raft.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) != s.id {
			out = append(out, string(srv.Address))
		}
	}
	return out
}

// newRPCServer makes the net/rpc server for one connection or session.
func (s *Server) newRPCServer(conn endpoints.ConnInfo) *netrpc.Server {
	rs := netrpc.NewServer()
	if err := endpoints.Register(rs, s.deps, conn); err != nil {
		// Registration only fails on a programming error.
		panic(err)
	}
	return rs
}

// AddLeaderDuty registers work to run only while this server leads.
func (s *Server) AddLeaderDuty(d LeaderDuty) {
	s.dutiesMu.Lock()
	defer s.dutiesMu.Unlock()
	s.leaderDuties = append(s.leaderDuties, d)
}

// Shutdown stops the server without leaving the cluster: a restart on the
// same data dir rejoins as the same member.
func (s *Server) Shutdown() error {
	var err error
	s.shutdownOnce.Do(func() {
		s.logger.Info("shutting down")
		close(s.shutdownCh)
		s.listener.Close()
		s.connsMu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.connsMu.Unlock()
		// Raft's transport closes the stream layer itself once it is shut
		// down; closed before that, its accept loop would log the closed
		// layer as an error on every clean shutdown.
		err = s.raft.Shutdown()
		s.stream.Close()
		s.pool.Shutdown()
		s.wg.Wait()
	})
	return err
}

// SubmitClaim implements endpoints.Writer.
func (s *Server) SubmitClaim(req *structs.VolumeClaimRequest) (*structs.ClaimResult, uint64, error) {
	res, index, err := s.claims.submit(req)
	countClaim(req, res, err)
	return res, index, err
}

// DefaultHeartbeatTTL is how soon a node must heartbeat. 10 s at production
// timings: long enough that a busy client is not marked down, short enough
// that a dead node's claims start waiting for it within seconds.
const DefaultHeartbeatTTL = 10 * time.Second

// HeartbeatTTL implements endpoints.Cluster. The heartbeat timers hold it:
// SetHeartbeatTTL may change it while the server runs.
func (s *Server) HeartbeatTTL() time.Duration { return s.beats.TTL() }
