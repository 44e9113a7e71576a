package server

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/version"
)

// AutopilotConfig tunes the leader's Raft health checks and dead-server
// cleanup (hashicorp/raft-autopilot). Zero values take the defaults.
type AutopilotConfig struct {
	// CleanupDeadServers removes a server the leader has not reached for
	// DeadServerThreshold from the Raft configuration, while the rule
	// below keeps a quorum (-autopilot-cleanup-dead-servers).
	CleanupDeadServers bool
	// LastContactThreshold: a server that has not heard from the leader
	// for longer is unhealthy (0 = 2 s × RaftMultiplier).
	LastContactThreshold time.Duration
	// MaxTrailingLogs: a server whose log is more entries behind the
	// leader's is unhealthy (0 = 1024).
	MaxTrailingLogs uint64
	// DeadServerThreshold: a server the leader has not reached for longer
	// is failed (0 = 5 min; not scaled: it is an operator's patience, not
	// a Raft timing).
	DeadServerThreshold time.Duration
	// MinQuorum: cleanup never leaves fewer voters than this (0 = only
	// autopilot's own rule: at most (voters-1)/2 removed at a time).
	MinQuorum uint
	// UpdateInterval is how often the leader asks every server for its
	// stats (0 = 2 s × RaftMultiplier); ReconcileInterval how often it looks
	// for failed servers to remove (0 = 10 s × RaftMultiplier; a server
	// turning failed also triggers a look at once).
	UpdateInterval    time.Duration
	ReconcileInterval time.Duration
}

// Defaults, at production timings (RaftMultiplier 1).
const (
	// defaultLastContactThreshold: a follower hears from the leader about
	// every 100 ms (heartbeats at HeartbeatTimeout/10) and starts a
	// pre-vote after 1 s without; past 2 s it has certainly stopped
	// following. Consul's 200 ms flags healthy servers during GC or fsync
	// stalls on a busy machine.
	defaultLastContactThreshold = 2 * time.Second
	// defaultMaxTrailingLogs: one AppendEntries carries up to 256 entries
	// (raftnode's maxAppendEntries) and the leader's index is read a moment
	// before the follower's, so a follower keeping up under load can trail
	// by a batch or two; four batches behind, it is not keeping up.
	defaultMaxTrailingLogs = 1024
	// defaultDeadServerThreshold: longer than a restart or an upgrade of
	// one server takes, so cleanup does not remove a server an operator is
	// merely restarting.
	defaultDeadServerThreshold = 5 * time.Minute
	defaultAutopilotUpdate     = 2 * time.Second
	defaultAutopilotReconcile  = 10 * time.Second
	// removeFailedTimeout bounds the wait to enqueue a removal.
	removeFailedTimeout = 10 * time.Second
)

// autopilotDuty runs raft-autopilot while this server leads and is its
// delegate (autopilot.ApplicationIntegration). Without a gossip layer the
// leader decides who is alive itself: a server is failed when it has not
// answered Status.RaftStats for DeadServerThreshold.
type autopilotDuty struct {
	s    *Server
	ap   *autopilot.Autopilot
	conf autopilot.Config
	// deadAfter is conf's DeadServerThreshold (autopilot has no such knob:
	// the delegate reports the failed servers).
	deadAfter time.Duration

	// runMu serialises SetEnabled; started is closed once autopilot's Start
	// (which computes a first state, RPCs included) returned.
	runMu   sync.Mutex
	on      bool
	started chan struct{}

	// mu guards what this leadership learnt of the servers and the latest
	// state.
	mu    sync.Mutex
	peers map[raft.ServerID]*peerWatch
	state *autopilot.State
}

// peerWatch is what the leader knows of one server's liveness.
type peerWatch struct {
	// firstSeen: when this leader first saw it in the configuration (a
	// server never reached counts as unreachable since then).
	firstSeen time.Time
	// answeredAt: its last answer to Status.RaftStats (zero = none); stats
	// that answer. contactAt: the newest moment it is known to have heard
	// from the leader (zero = never).
	answeredAt time.Time
	stats      autopilot.ServerStats
	contactAt  time.Time
	// failed: reported failed last time (for logging the changes).
	failed bool
	// features: the entry features it applies, from its last answer.
	features uint64
	// version: the server's build, from its last answer.
	version string
	// member: in the configuration last time KnownServers looked. A server
	// removed and added again (it came back and joined) is watched afresh:
	// its old silence must not get it removed again at once.
	member bool
}

func newAutopilotDuty(s *Server) *autopilotDuty {
	c := s.cfg.Autopilot
	scale := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return time.Duration(float64(def) * s.cfg.RaftMultiplier)
	}
	d := &autopilotDuty{
		s: s,
		conf: autopilot.Config{
			CleanupDeadServers:   c.CleanupDeadServers,
			LastContactThreshold: scale(c.LastContactThreshold, defaultLastContactThreshold),
			MaxTrailingLogs:      c.MaxTrailingLogs,
			MinQuorum:            c.MinQuorum,
		},
		deadAfter: c.DeadServerThreshold,
	}
	if d.conf.MaxTrailingLogs == 0 {
		d.conf.MaxTrailingLogs = defaultMaxTrailingLogs
	}
	if d.deadAfter <= 0 {
		d.deadAfter = defaultDeadServerThreshold
	}
	d.ap = autopilot.New(s.raft.Raft, d,
		autopilot.WithLogger(s.logger),
		autopilot.WithUpdateInterval(scale(c.UpdateInterval, defaultAutopilotUpdate)),
		autopilot.WithReconcileInterval(scale(c.ReconcileInterval, defaultAutopilotReconcile)))
	return d
}

// SetEnabled implements LeaderDuty. Autopilot's Start computes a first
// state (asking every server, bounded by half the update interval), so it
// runs in its own goroutine rather than hold up the other duties.
func (d *autopilotDuty) SetEnabled(enabled bool) {
	d.runMu.Lock()
	defer d.runMu.Unlock()
	if enabled == d.on {
		return
	}
	d.on = enabled
	if enabled {
		d.mu.Lock()
		d.peers = map[raft.ServerID]*peerWatch{}
		d.state = nil
		d.mu.Unlock()
		started := make(chan struct{})
		d.started = started
		go func() {
			defer close(started)
			d.ap.Start(context.Background())
		}()
		return
	}
	<-d.started
	<-d.ap.Stop()
	d.mu.Lock()
	d.peers, d.state = nil, nil
	d.mu.Unlock()
}

// AutopilotConfig implements autopilot.ApplicationIntegration.
func (d *autopilotDuty) AutopilotConfig() *autopilot.Config {
	c := d.conf
	return &c
}

// KnownServers implements autopilot.ApplicationIntegration: the servers
// of the Raft configuration, failed when the leader has not reached them
// for the dead-server threshold. Autopilot removes a configured server the
// delegate does not know as stale, at once: so every server this leader
// has seen stays known (as left once out of the configuration), and the
// configuration read failing returns those rather than none.
func (d *autopilotDuty) KnownServers() map[raft.ServerID]*autopilot.Server {
	var servers []raft.Server
	if f := d.s.raft.Raft.GetConfiguration(); f.Error() == nil {
		servers = f.Configuration().Servers
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peers == nil {
		d.peers = map[raft.ServerID]*peerWatch{}
	}
	out := make(map[raft.ServerID]*autopilot.Server, len(d.peers)+len(servers))
	inConfig := make(map[raft.ServerID]bool, len(servers))
	for _, srv := range servers {
		inConfig[srv.ID] = true
		w := d.watch(srv.ID, now)
		if !w.member {
			w.member, w.firstSeen, w.answeredAt, w.contactAt, w.failed = true, now, time.Time{}, time.Time{}, false
		}
		status := autopilot.NodeAlive
		if string(srv.ID) != d.s.id && d.unreachableFor(w, now) > d.deadAfter {
			status = autopilot.NodeFailed
		}
		if failed := status == autopilot.NodeFailed; failed != w.failed {
			w.failed = failed
			if failed {
				d.s.logger.Warn("server unreachable past the dead-server threshold: failed",
					"server_id", srv.ID, "address", srv.Address, "threshold", d.deadAfter, "cleanup", d.conf.CleanupDeadServers)
			} else {
				d.s.logger.Info("failed server reachable again", "server_id", srv.ID, "address", srv.Address)
			}
		}
		out[srv.ID] = d.autopilotServer(srv.ID, srv.Address, status)
	}
	for id, w := range d.peers {
		if !inConfig[id] && len(servers) > 0 {
			w.member = false
		}
		if _, ok := out[id]; !ok {
			out[id] = d.autopilotServer(id, "", autopilot.NodeLeft)
		}
	}
	return out
}

func (d *autopilotDuty) autopilotServer(id raft.ServerID, addr raft.ServerAddress, status autopilot.NodeStatus) *autopilot.Server {
	v := version.Short()
	if w := d.peers[id]; string(id) != d.s.id && w != nil {
		v = w.version
	} else if string(id) != d.s.id {
		v = ""
	}
	return &autopilot.Server{
		ID: id, Name: d.s.ServerName(string(id)), Address: addr, NodeStatus: status, Version: v,
		RaftVersion: raft.ProtocolVersionMax, IsLeader: string(id) == d.s.id,
		// Every claimd server is meant to vote (autopilot counts only
		// potential voters when it decides how many it may remove).
		NodeType: autopilot.NodeVoter,
	}
}

// silentFor is how long a server has not answered this leader's health
// checks (since this leader began to watch it, when it never has).
func (d *autopilotDuty) silentFor(id raft.ServerID) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w := d.peers[id]; w != nil {
		return d.unreachableFor(w, time.Now())
	}
	return 0
}

// versionOf is a server's build from its last answer ("" if none).
func (d *autopilotDuty) versionOf(id raft.ServerID) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w := d.peers[id]; w != nil {
		return w.version
	}
	return ""
}

// featuresOf is a server's entry features from its last answer (0: none
// yet, or a server older than the field).
func (d *autopilotDuty) featuresOf(id raft.ServerID) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w := d.peers[id]; w != nil {
		return w.features
	}
	return 0
}

// watch returns the server's record, creating it the first time this
// leader sees the server. Call with d.mu held.
func (d *autopilotDuty) watch(id raft.ServerID, now time.Time) *peerWatch {
	w, ok := d.peers[id]
	if !ok {
		w = &peerWatch{firstSeen: now}
		d.peers[id] = w
	}
	return w
}

// unreachableFor is how long the leader has not reached the server.
func (d *autopilotDuty) unreachableFor(w *peerWatch, now time.Time) time.Duration {
	last := w.firstSeen
	if w.answeredAt.After(last) {
		last = w.answeredAt
	}
	return now.Sub(last)
}

// FetchServerStats implements autopilot.ApplicationIntegration: every
// server is asked for its stats (Status.RaftStats, with the server token)
// at once, the leader reads its own. A server that does not answer within
// ctx gets its last known stats with the time since its last known contact
// with the leader, so its LastContact keeps growing while it is away
// (autopilot would otherwise keep showing the value of its last answer).
func (d *autopilotDuty) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	type answer struct {
		id    raft.ServerID
		at    time.Time
		stats structs.RaftStats
		err   error
	}
	token := d.s.serverToken()
	answers := make(chan answer, len(servers))
	var wg sync.WaitGroup
	for id, srv := range servers {
		if string(id) == d.s.id {
			answers <- answer{id: id, at: time.Now(), stats: endpoints.LocalRaftStats(d.s.raft.Raft)}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reply structs.RaftStats
			err := d.s.pool.RPC(ctx, string(srv.Address), "Status.RaftStats", &structs.EmptyArgs{AuthToken: token}, &reply)
			answers <- answer{id: id, at: time.Now(), stats: reply, err: err}
		}()
	}
	wg.Wait()
	close(answers)

	now := time.Now()
	out := make(map[raft.ServerID]*autopilot.ServerStats, len(servers))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peers == nil {
		d.peers = map[raft.ServerID]*peerWatch{}
	}
	for a := range answers {
		w := d.watch(a.id, now)
		if a.err != nil {
			d.s.logger.Debug("server did not answer the raft health check", "server_id", a.id, "error", a.err)
			continue
		}
		w.answeredAt = a.at
		w.version = a.stats.Version
		w.features = a.stats.Features
		w.stats = autopilot.ServerStats{LastContact: a.stats.LastContact, LastTerm: a.stats.LastTerm, LastIndex: a.stats.LastIndex}
		if a.stats.LastContact >= 0 {
			w.contactAt = a.at.Add(-a.stats.LastContact)
		}
		st := w.stats
		out[a.id] = &st
	}
	for id := range servers {
		if _, ok := out[id]; ok {
			continue
		}
		w := d.watch(id, now)
		st := w.stats
		switch {
		case !w.contactAt.IsZero():
			st.LastContact = now.Sub(w.contactAt)
		case w.answeredAt.IsZero():
			st.LastContact = now.Sub(w.firstSeen)
		}
		out[id] = &st
	}
	return out
}

// RemoveFailedServer implements autopilot.ApplicationIntegration. Autopilot
// already chose it within its quorum rule; the server is removed only if
// it is still in the configuration and still unreachable (it may have
// answered since the state was computed), and only from the configuration
// the decision was made on (a change since makes Raft refuse; the next
// round decides again). The wait is bounded by removeFailedTimeout and
// ends early if leadership is lost or Raft stops.
func (d *autopilotDuty) RemoveFailedServer(srv *autopilot.Server) {
	now := time.Now()
	d.mu.Lock()
	w, ok := d.peers[srv.ID]
	stillFailed := ok && d.unreachableFor(w, now) > d.deadAfter
	var away time.Duration
	if ok {
		away = d.unreachableFor(w, now)
	}
	d.mu.Unlock()
	if !stillFailed || string(srv.ID) == d.s.id {
		return
	}
	r := d.s.raft.Raft
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if s.ID != srv.ID {
			continue
		}
		rf := r.RemoveServer(s.ID, f.Index(), removeFailedTimeout)
		if err := rf.Error(); err != nil {
			d.s.logger.Warn("removing a failed server failed", "server_id", s.ID, "address", s.Address, "error", err)
			return
		}
		d.s.logger.Warn("removed failed server from the raft configuration", "server_id", s.ID,
			"address", s.Address, "unreachable_for", away.Round(time.Second), "index", rf.Index())
		return
	}
}

// NotifyState implements autopilot.ApplicationIntegration: it keeps the
// state for Operator.RaftHealth, logs servers turning unhealthy or healthy,
// and, with cleanup on, asks for a removal round as soon as a server is
// failed rather than at the next reconcile tick.
func (d *autopilotDuty) NotifyState(st *autopilot.State) {
	d.mu.Lock()
	prev := d.state
	d.state = st
	d.mu.Unlock()
	anyFailed := false
	for id, srv := range st.Servers {
		if srv.Server.NodeStatus == autopilot.NodeFailed {
			anyFailed = true
		}
		if prev == nil {
			continue
		}
		if old, ok := prev.Servers[id]; ok && old.Health.Healthy != srv.Health.Healthy {
			if srv.Health.Healthy {
				d.s.logger.Info("raft server healthy again", "server_id", id, "address", srv.Server.Address)
			} else {
				d.s.logger.Warn("raft server unhealthy", "server_id", id, "address", srv.Server.Address,
					"last_contact", srv.Stats.LastContact, "last_index", srv.Stats.LastIndex, "last_term", srv.Stats.LastTerm)
			}
		}
	}
	if anyFailed && d.conf.CleanupDeadServers {
		d.ap.RemoveDeadServers()
	}
}

// health turns the latest state into the operator's view; nil before
// autopilot computed one in this leadership.
func (d *autopilotDuty) health() *structs.RaftHealthResponse {
	d.mu.Lock()
	st := d.state
	d.mu.Unlock()
	if st == nil || len(st.Servers) == 0 {
		return nil
	}
	out := &structs.RaftHealthResponse{
		Healthy: st.Healthy, FailureTolerance: st.FailureTolerance, LeaderID: string(st.Leader),
		LastContactThreshold: structs.HumanDuration(d.conf.LastContactThreshold),
		MaxTrailingLogs:      d.conf.MaxTrailingLogs,
		DeadServerThreshold:  structs.HumanDuration(d.deadAfter),
		CleanupDeadServers:   d.conf.CleanupDeadServers,
		MinQuorum:            d.conf.MinQuorum,
	}
	var leaderIndex uint64
	if l, ok := st.Servers[st.Leader]; ok {
		leaderIndex = l.Stats.LastIndex
	}
	for id, srv := range st.Servers {
		h := structs.RaftServerHealth{
			ID: string(id), Name: srv.Server.Name, Address: string(srv.Server.Address), Version: d.s.ServerVersion(string(id)),
			Features: structs.FeatureNames(d.s.featuresOf(id)),
			Leader:   srv.State == autopilot.RaftLeader, Voter: srv.HasVotingRights(),
			Status: structs.RaftServerAlive, Healthy: srv.Health.Healthy, StableSince: srv.Health.StableSince,
			LastContact: structs.HumanDuration(srv.Stats.LastContact), LastTerm: srv.Stats.LastTerm, LastIndex: srv.Stats.LastIndex,
		}
		switch {
		case srv.Server.NodeStatus != autopilot.NodeAlive:
			h.Status = structs.RaftServerFailed
		case string(id) != d.s.id && d.silentFor(id) > d.conf.LastContactThreshold:
			h.Status = structs.RaftServerUnreachable
		}
		if leaderIndex > srv.Stats.LastIndex {
			h.IndexLag = leaderIndex - srv.Stats.LastIndex
		}
		out.Servers = append(out.Servers, h)
	}
	for f := uint64(1); f != 0 && f <= structs.EntryFeatures; f <<= 1 {
		if structs.EntryFeatures&f != 0 && d.s.AllServersSupport(f) {
			out.EntryFeatures = append(out.EntryFeatures, structs.FeatureNames(f)...)
		}
	}
	// Leader first, then by name and ID: a stable order for operators.
	sort.Slice(out.Servers, func(i, j int) bool {
		a, b := out.Servers[i], out.Servers[j]
		if a.Leader != b.Leader {
			return a.Leader
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
	return out
}

// RaftHealth implements endpoints.Cluster: the leader's view, no_leader
// (which callers retry) on a server that does not lead or before the
// leader's first round of checks.
func (s *Server) RaftHealth() (*structs.RaftHealthResponse, error) {
	if _, self := s.Leader(); !self {
		return nil, structs.NewError(structs.CodeNoLeader, "this server does not lead: raft health is the leader's view")
	}
	h := s.autopilot.health()
	if h == nil {
		return nil, structs.NewError(structs.CodeNoLeader, "the leader has not checked its servers yet; retry")
	}
	return h, nil
}
