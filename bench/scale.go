package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/internal/backoff"
	"github.com/claimd/claimd/structs"
)

// Scale mode (issue 20 item 5): many simulated client nodes, each with
// its own node secret and its own heartbeat at the TTL the servers hand
// out, and many volumes each claimed by an alloc on one of them; then
// what an idle cluster of that size costs (each server's CPU and RSS while
// only heartbeats flow) and, with Config.Takeover, how long a new leader
// takes to serve again after the leader is killed.
//
// Nodes share a few sessions (Config.NodeSessions, spread over the
// servers): a server binds every node registered on a session to it and
// each call names its node by the node's secret, so a few hundred
// goroutines and sockets stand in for thousands of agents. An agent's
// own session would add one TCP connection and yamux session per node to
// each server's load; the RPCs, Raft writes and heartbeat timers are the
// same. Unlike an agent, a node does not move to another server on its
// own when the leader is unreachable (its session's other nodes would move
// with it); its session moves when the server it talks to is gone.
//
// The mode leaves its state in place: 100,000 claimed volumes are not
// worth releasing one by one. Run it on a cluster made for it.

// Defaults of scale mode.
const (
	DefaultScaleNodes   = 5000
	DefaultScaleVolumes = 100000
	// nodesPerSession when Config.NodeSessions is 0.
	nodesPerSession = 100
	// defaultSettle and defaultIdle: the pause before the idle window
	// (the last claims' Raft entries, a snapshot the claims may have
	// started) and the window itself.
	defaultSettle = 10 * time.Second
	defaultIdle   = 30 * time.Second
	// takeoverDeadline bounds every wait after the leader is killed.
	takeoverDeadline = 90 * time.Second
)

// ServerIdle is one server while the cluster is idle.
type ServerIdle struct {
	Address    string  `json:"address"`
	PID        int     `json:"pid"`
	Leader     bool    `json:"leader,omitempty"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUCore is the share of one core over the window (0.15 = 15%).
	CPUCore  float64 `json:"cpu_core"`
	RSSBytes int64   `json:"rss_bytes"`
}

// Takeover is what a new leader took, counted from the moment the old one
// was killed (SIGKILL).
type Takeover struct {
	Killed    string `json:"killed"`
	KilledPID int    `json:"killed_pid"`
	NewLeader string `json:"new_leader,omitempty"`
	// LeaderSeconds: until a surviving server named a new leader.
	LeaderSeconds float64 `json:"leader_seconds,omitempty"`
	// ClaimSeconds: until a claim sent to a surviving server succeeded
	// (the new leader applies claims).
	ClaimSeconds float64 `json:"claim_seconds,omitempty"`
	// FreedSeconds: until that claim, released at once, was freed (the
	// new leader's release watcher runs).
	FreedSeconds float64 `json:"freed_seconds,omitempty"`
	// Heartbeats sent after the kill: when the first was accepted; when
	// the last of those sent before the new leader was named was answered
	// (HeldBeats of them, HeldFailed failed: the servers hold a call while
	// there is no leader); and when every node had had one accepted (at
	// least one heartbeat interval, a third of the TTL, by construction).
	FirstBeatSeconds float64 `json:"first_beat_seconds,omitempty"`
	HeldBeatsSeconds float64 `json:"held_beats_seconds,omitempty"`
	HeldBeats        int     `json:"held_beats,omitempty"`
	HeldFailed       int     `json:"held_failed,omitempty"`
	AllBeatsSeconds  float64 `json:"all_beats_seconds,omitempty"`
	// Seconds is the takeover: a claim served and every heartbeat held
	// through the election answered, whichever came last.
	Seconds float64 `json:"seconds,omitempty"`
	// NodesSeenDown counts the run's nodes seen marked down by polling the
	// node list once a second until WatchedSeconds after the kill (two
	// TTLs and 5 s: by then the new leader's first timers have fired).
	NodesSeenDown  int     `json:"nodes_seen_down"`
	TTLSeconds     float64 `json:"ttl_seconds"`
	WatchedSeconds float64 `json:"watched_seconds"`
	// Error says what did not happen within the deadline.
	Error string `json:"error,omitempty"`
}

// scaleRun is one scale-mode invocation.
type scaleRun struct {
	cfg *Config
	c   *cluster
	res *Result

	sessions []*nodeSession
	nodes    []*simNode
	// lastOK is each node's newest accepted heartbeat's send time (unix
	// ns), by index in nodes; index maps a node to it.
	lastOK   []atomic.Int64
	index    map[*simNode]int
	beatsOK  atomic.Int64
	beatsBad atomic.Int64
	// killedAt (unix ns, 0 before the takeover) makes the heartbeat hook
	// record every beat sent after it in afterKill.
	killedAt  atomic.Int64
	killMu    sync.Mutex
	afterKill []beatRecord
}

// beatRecord is one heartbeat sent after the kill.
type beatRecord struct {
	sent, answered time.Time
	ok             bool
}

func (cfg *Config) scaleDefaults() {
	if cfg.Nodes <= 0 {
		cfg.Nodes = DefaultScaleNodes
	}
	if cfg.NodeSessions <= 0 {
		cfg.NodeSessions = (cfg.Nodes + nodesPerSession - 1) / nodesPerSession
	}
	cfg.NodeSessions = min(cfg.NodeSessions, cfg.Nodes)
	if cfg.Settle <= 0 {
		cfg.Settle = defaultSettle
	}
	if cfg.Idle <= 0 {
		cfg.Idle = defaultIdle
	}
}

// runScale is Run for ModeScale.
func runScale(ctx context.Context, c *cluster, cfg *Config, emit func(*Result)) error {
	leader, err := c.leader(ctx)
	if err != nil {
		return err
	}
	res := &Result{
		Mode: ModeScale, Target: TargetLeader, Address: leader, Leader: leader, Security: c.security,
		Callers: slices.Max(cfg.Callers), Volumes: cfg.Volumes, Nodes: cfg.Nodes, NodeSessions: cfg.NodeSessions,
		Errors: map[string]int64{}, Started: time.Now(),
	}
	s := &scaleRun{cfg: cfg, c: c, res: res}
	defer s.close()
	if err := s.startNodes(ctx); err != nil {
		return err
	}
	if err := s.claimAll(ctx); err != nil {
		return err
	}
	if err := s.idle(ctx); err != nil {
		return err
	}
	if cfg.PauseFile != "" {
		if err := s.pause(ctx); err != nil {
			return err
		}
		// What the script did (a snapshot restore installs the whole state
		// on every server) must not weigh on the takeover.
		fmt.Fprintf(cfg.Progress, "settling for %s\n", cfg.Settle)
		if err := backoff.Sleep(ctx, cfg.Settle); err != nil {
			return err
		}
	}
	if cfg.Takeover {
		res.Takeover = s.takeover(ctx)
	}
	res.HeartbeatsFailed = s.beatsBad.Load()
	if len(res.Errors) == 0 {
		res.Errors = nil
	}
	emit(res)
	return ctx.Err()
}

func (s *scaleRun) close() {
	var wg sync.WaitGroup
	for _, sess := range s.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess.close()
		}()
	}
	wg.Wait()
}

// startNodes opens the sessions (spread over the servers) and registers
// the nodes on them, Callers at a time.
func (s *scaleRun) startNodes(ctx context.Context) error {
	cfg := s.cfg
	fmt.Fprintf(cfg.Progress, "registering %d simulated nodes on %d shared sessions\n", cfg.Nodes, cfg.NodeSessions)
	t0 := time.Now()
	for i := range cfg.NodeSessions {
		// Session i starts at server i (mod n), as agents given the
		// servers in different orders would.
		servers := slices.Clone(s.c.servers)
		k := i % len(servers)
		servers = append(servers[k:], servers[:k]...)
		s.sessions = append(s.sessions, newNodeSession(servers, cfg))
	}
	s.nodes = make([]*simNode, cfg.Nodes)
	s.lastOK = make([]atomic.Int64, cfg.Nodes)
	s.index = make(map[*simNode]int, cfg.Nodes)
	var mu sync.Mutex
	beat := func(n *simNode, sent time.Time, ok bool) {
		if k := s.killedAt.Load(); k != 0 && sent.UnixNano() >= k {
			s.killMu.Lock()
			s.afterKill = append(s.afterKill, beatRecord{sent: sent, answered: time.Now(), ok: ok})
			s.killMu.Unlock()
		}
		if !ok {
			s.beatsBad.Add(1)
			return
		}
		s.beatsOK.Add(1)
		mu.Lock()
		i, known := s.index[n]
		mu.Unlock()
		if known && sent.UnixNano() > s.lastOK[i].Load() {
			s.lastOK[i].Store(sent.UnixNano())
		}
	}
	err := forEachIndex(ctx, cfg.Nodes, s.res.Callers, func(ctx context.Context, i int) error {
		sess := s.sessions[i%len(s.sessions)]
		n, err := sess.startNode(ctx, fmt.Sprintf("%s-n%05d", cfg.Prefix, i), beat)
		if err != nil {
			return err
		}
		mu.Lock()
		s.nodes[i] = n
		s.index[n] = i
		mu.Unlock()
		return nil
	})
	s.res.NodesSeconds = time.Since(t0).Seconds()
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Progress, "  done in %s\n", time.Since(t0).Round(time.Millisecond))
	return nil
}

// forEachIndex calls fn(i) for i in [0, n), workers at a time, and
// returns the first error (the others stop taking work).
func forEachIndex(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// claimAll registers the volumes, places alloc i on node i mod Nodes and
// has it claim volume i, with that node's secret, Callers at a time.
func (s *scaleRun) claimAll(ctx context.Context) error {
	cfg := s.cfg
	v := cfg.Volumes
	vols := make([]string, v)
	allocs := make([]*structs.Alloc, v)
	for i := range v {
		vols[i] = fmt.Sprintf("%s-v%06d", cfg.Prefix, i)
		allocs[i] = &structs.Alloc{ID: fmt.Sprintf("%s-a%06d", cfg.Prefix, i), NodeID: s.nodes[i%len(s.nodes)].id,
			Volumes: []*structs.AllocVolumeRequest{{VolumeID: vols[i]}}}
	}
	fmt.Fprintf(cfg.Progress, "registering %d volumes and placing %d allocs over the nodes\n", v, v)
	t0 := time.Now()
	if err := s.c.registerVolumes(ctx, vols); err != nil {
		return err
	}
	if err := s.c.placeAllocs(ctx, allocs); err != nil {
		return err
	}
	s.res.VolumesSeconds = time.Since(t0).Seconds()
	fmt.Fprintf(cfg.Progress, "  done in %s; claiming every volume with %d callers\n", time.Since(t0).Round(time.Millisecond), s.res.Callers)
	clients, err := s.c.callerClients(ctx, s.res.Address, s.res.Callers, "")
	if err != nil {
		return err
	}
	defer closeAll(clients)
	t1 := time.Now()
	var mu sync.Mutex
	err = forEachIndex(ctx, v, len(clients), func(ctx context.Context, i int) error {
		n := s.nodes[i%len(s.nodes)]
		req := &structs.VolumeClaimRequest{VolumeID: vols[i], AllocID: allocs[i].ID, NodeID: n.id, Mode: structs.ClaimModeWrite}
		req.AuthToken = n.secret
		// A failure that may not have been applied (timeout, lost
		// connection, no leader for a moment) is counted and tried again,
		// a few times: every volume must end up claimed.
		var err error
		for range 5 {
			if _, err = clients[i%len(clients)].Claim(ctx, req); err == nil {
				return nil
			}
			mu.Lock()
			s.res.Errors[errorCode(err)]++
			mu.Unlock()
			if refused(err) {
				break
			}
			if serr := backoff.Sleep(ctx, 200*time.Millisecond); serr != nil {
				return serr
			}
		}
		return fmt.Errorf("claim %s: %w", vols[i], err)
	})
	s.res.ClaimsSeconds = time.Since(t1).Seconds()
	s.res.Claims = int64(v)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Progress, "  %d claims in %s\n", v, time.Since(t1).Round(time.Millisecond))
	return nil
}

// idle waits Settle, then measures each server's CPU over Idle and its
// RSS at the end, and the heartbeats accepted meanwhile.
func (s *scaleRun) idle(ctx context.Context) error {
	cfg := s.cfg
	m := s.c.cpu
	if m == nil || len(m.servers) == 0 {
		s.res.NoCPU = "no server processes to measure"
		if m != nil && m.reason != "" {
			s.res.NoCPU = m.reason
		}
	}
	fmt.Fprintf(cfg.Progress, "settling for %s\n", cfg.Settle)
	if err := backoff.Sleep(ctx, cfg.Settle); err != nil {
		return err
	}
	leader, err := s.c.leader(ctx)
	if err != nil {
		return err
	}
	s.res.Leader, s.res.Address = leader, leader
	fmt.Fprintf(cfg.Progress, "idle: measuring the servers for %s (leader %s)\n", cfg.Idle, leader)
	var first cpuSample
	if s.res.NoCPU == "" {
		first = m.sample()
	}
	b0 := s.beatsOK.Load()
	t0 := time.Now()
	if err := backoff.Sleep(ctx, cfg.Idle); err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	s.res.IdleSeconds = secs
	s.res.HeartbeatsPerSec = float64(s.beatsOK.Load()-b0) / secs
	if s.res.NoCPU != "" {
		return nil
	}
	last := m.sample()
	if first.err != nil || last.err != nil {
		s.res.NoCPU = errors.Join(first.err, last.err).Error()
		return nil
	}
	for addr, pid := range m.servers {
		cpu := float64(last.ticks[addr]-first.ticks[addr]) / userHZ
		rss, err := readRSS(pid)
		if err != nil {
			s.res.NoCPU = err.Error()
			return nil
		}
		s.res.Idle = append(s.res.Idle, ServerIdle{
			Address: addr, PID: pid, Leader: addr == leader, CPUSeconds: cpu, CPUCore: cpu / secs, RSSBytes: rss,
		})
	}
	sort.Slice(s.res.Idle, func(i, j int) bool { return s.res.Idle[i].Address < s.res.Idle[j].Address })
	return nil
}

// pause waits, the nodes heartbeating, until cfg.PauseFile exists (at
// most maxPause): a script's turn to act on the loaded cluster (snapshot
// save and restore in scripts/bench-scale.sh).
func (s *scaleRun) pause(ctx context.Context) error {
	fmt.Fprintf(s.cfg.Progress, "paused: nodes heartbeating until %s exists (at most %s)\n", s.cfg.PauseFile, maxPause)
	ctx, cancel := context.WithTimeout(ctx, maxPause)
	defer cancel()
	err := pollUntil(ctx, 100*time.Millisecond, func() bool {
		_, err := os.Stat(s.cfg.PauseFile)
		return err == nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pause file %s did not appear within %s", s.cfg.PauseFile, maxPause)
	}
	return err
}

// maxPause bounds the pause.
const maxPause = 10 * time.Minute

// takeover kills the leader and times the new one's takeover (see
// Takeover). It needs the leader's PID: only servers on this machine.
func (s *scaleRun) takeover(ctx context.Context) *Takeover {
	tk := &Takeover{}
	// The leader now: leadership may have moved since the idle window
	// (a snapshot restore on a loaded machine, say).
	old, err := s.c.leader(ctx)
	if err != nil {
		tk.Error = err.Error()
		return tk
	}
	if old != s.res.Leader {
		fmt.Fprintf(s.cfg.Progress, "takeover: the leader moved from %s to %s since the idle window\n", s.res.Leader, old)
	}
	tk.Killed = old
	pid := 0
	if s.c.cpu != nil {
		pid = s.c.cpu.servers[old]
	}
	if pid == 0 {
		tk.Error = "the leader's process is not known (servers not on this machine): not killed"
		return tk
	}
	tk.KilledPID = pid
	var survivors []string
	for _, a := range s.c.servers {
		if a != old {
			survivors = append(survivors, a)
		}
	}
	// The probe pair: one more volume and alloc on node 0, claimed after
	// the kill through a surviving server.
	probeVol, probeAlloc := s.cfg.Prefix+"-takeover-v", s.cfg.Prefix+"-takeover-a"
	node := s.nodes[0]
	if err := s.c.registerVolumes(ctx, []string{probeVol}); err != nil {
		tk.Error = err.Error()
		return tk
	}
	if err := s.c.placeAllocs(ctx, []*structs.Alloc{{ID: probeAlloc, NodeID: node.id,
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: probeVol}}}}); err != nil {
		tk.Error = err.Error()
		return tk
	}
	probe, err := api.NewClient(s.cfg.apiConfig(survivors, node.secret))
	if err != nil {
		tk.Error = err.Error()
		return tk
	}
	defer probe.Close()
	reader, err := api.NewClient(s.cfg.apiConfig(survivors, s.cfg.Token))
	if err != nil {
		tk.Error = err.Error()
		return tk
	}
	defer reader.Close()

	ttl := s.ttl()
	tk.TTLSeconds = ttl.Seconds()
	fmt.Fprintf(s.cfg.Progress, "takeover: killing the leader %s (pid %d)\n", old, pid)
	t0 := time.Now()
	s.killedAt.Store(t0.UnixNano())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		tk.Error = fmt.Sprintf("kill %d: %v", pid, err)
		return tk
	}
	s.c.cpu.forget(old)
	since := func() float64 { return time.Since(t0).Seconds() }
	deadline := t0.Add(takeoverDeadline)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	var wg sync.WaitGroup
	var mu sync.Mutex
	fail := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if tk.Error == "" {
			tk.Error = fmt.Sprintf("%s: %v", what, err)
		}
	}
	// A new leader named by a survivor.
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := pollUntil(ctx, 20*time.Millisecond, func() bool {
			cctx, cc := context.WithTimeout(ctx, time.Second)
			defer cc()
			a, err := reader.Leader(cctx)
			if err == nil && a != "" && a != old {
				mu.Lock()
				tk.NewLeader, tk.LeaderSeconds = a, since()
				mu.Unlock()
				return true
			}
			return false
		})
		if err != nil {
			fail("no new leader", err)
		}
	}()
	// A claim served, then released and freed.
	wg.Add(1)
	go func() {
		defer wg.Done()
		req := func() *structs.VolumeClaimRequest {
			return &structs.VolumeClaimRequest{VolumeID: probeVol, AllocID: probeAlloc, NodeID: node.id, Mode: structs.ClaimModeWrite}
		}
		if err := pollUntil(ctx, 20*time.Millisecond, func() bool {
			cctx, cc := context.WithTimeout(ctx, 5*time.Second)
			defer cc()
			_, err := probe.Claim(cctx, req())
			return err == nil
		}); err != nil {
			fail("no claim served", err)
			return
		}
		mu.Lock()
		tk.ClaimSeconds = since()
		mu.Unlock()
		if err := pollUntil(ctx, 20*time.Millisecond, func() bool {
			cctx, cc := context.WithTimeout(ctx, 5*time.Second)
			defer cc()
			_, err := probe.Release(cctx, probeVol, probeAlloc)
			return err == nil
		}); err != nil {
			fail("no release served", err)
			return
		}
		if err := pollUntil(ctx, 20*time.Millisecond, func() bool {
			cctx, cc := context.WithTimeout(ctx, 5*time.Second)
			defer cc()
			v, _, err := reader.Volume(cctx, probeVol, structs.QueryOptions{})
			return err == nil && v != nil && len(v.WriteClaims)+len(v.PastClaims) == 0
		}); err != nil {
			fail("the released claim was not freed", fmt.Errorf("%w (%s)", err, releaseState(reader, probeVol, probeAlloc)))
			return
		}
		mu.Lock()
		tk.FreedSeconds = since()
		mu.Unlock()
	}()
	// Every node's heartbeat accepted.
	wg.Add(1)
	go func() {
		defer wg.Done()
		after := t0.UnixNano()
		err := pollUntil(ctx, 20*time.Millisecond, func() bool {
			n := 0
			for i := range s.lastOK {
				if s.lastOK[i].Load() >= after {
					n++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if n > 0 && tk.FirstBeatSeconds == 0 {
				tk.FirstBeatSeconds = since()
			}
			if n == len(s.lastOK) {
				tk.AllBeatsSeconds = since()
				return true
			}
			return false
		})
		if err != nil {
			fail("not every node's heartbeat was accepted", err)
		}
	}()
	// Nodes marked down, seen in the node list once a second until two
	// TTLs and 5 s after the kill.
	watch := 2*ttl + 5*time.Second
	tk.WatchedSeconds = watch.Seconds()
	down := map[string]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		end := t0.Add(watch)
		for time.Now().Before(end) && ctx.Err() == nil {
			cctx, cc := context.WithTimeout(ctx, 5*time.Second)
			nodes, _, err := reader.Nodes(cctx, structs.QueryOptions{AllowStale: true})
			cc()
			if err == nil {
				for _, n := range nodes {
					if n.Status == structs.NodeStatusDown && strings.HasPrefix(n.ID, s.cfg.Prefix) {
						down[n.ID] = true
					}
				}
			}
			_ = backoff.Sleep(ctx, time.Second)
		}
	}()
	wg.Wait()
	tk.NodesSeenDown = len(down)
	// The nodes stop heartbeating when the tool exits, and the servers then
	// mark them down: a script counting the servers' "marking it down" log
	// lines counts up to this line.
	fmt.Fprintf(s.cfg.Progress, "takeover: watched for %s; nodes seen down: %d\n", watch, len(down))
	// Every node has had a beat sent after the kill accepted, and a node
	// has one beat in flight at a time: every beat held through the
	// election has been answered.
	if tk.LeaderSeconds > 0 && tk.AllBeatsSeconds > 0 {
		named := t0.Add(time.Duration(tk.LeaderSeconds * float64(time.Second)))
		s.killMu.Lock()
		for _, b := range s.afterKill {
			if b.sent.Before(named) {
				tk.HeldBeats++
				if !b.ok {
					tk.HeldFailed++
				}
				tk.HeldBeatsSeconds = max(tk.HeldBeatsSeconds, b.answered.Sub(t0).Seconds())
			}
		}
		s.killMu.Unlock()
	}
	if tk.ClaimSeconds > 0 && tk.AllBeatsSeconds > 0 {
		tk.Seconds = max(tk.ClaimSeconds, tk.HeldBeatsSeconds)
	}
	return tk
}

// ttl is the heartbeat TTL the servers hand out (from a node's
// registration; 10 s, the default, if none was seen).
func (s *scaleRun) ttl() time.Duration {
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := s.nodes[0]
	req := &structs.NodeUpdateStatusRequest{NodeID: n.id, Status: structs.NodeStatusReady}
	req.AuthToken = n.secret
	var resp structs.NodeUpdateResponse
	if err := n.sess.call(cctx, "Node.UpdateStatus", req, &resp); err == nil && resp.HeartbeatTTL > 0 {
		return resp.HeartbeatTTL
	}
	return 10 * time.Second
}

// pollUntil calls ok every interval until it returns true or ctx ends.
func pollUntil(ctx context.Context, interval time.Duration, ok func() bool) error {
	for {
		if ok() {
			return nil
		}
		if err := backoff.Sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// releaseState says where a release that did not finish stands: the past
// claim's state and the leader's retry record for the volume (attempts,
// last error, next try), so a slow takeover run explains itself.
func releaseState(c *api.Client, volID, allocID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var parts []string
	if v, _, err := c.Volume(ctx, volID, structs.QueryOptions{}); err != nil {
		parts = append(parts, "volume: "+err.Error())
	} else if v != nil {
		if pc := v.PastClaims[allocID]; pc != nil {
			parts = append(parts, fmt.Sprintf("past claim in state %s on node %s", pc.State, pc.NodeID))
		} else if v.WriteClaims[allocID] != nil {
			parts = append(parts, "still a live claim")
		}
	}
	if st, err := c.ReleaseStatus(ctx); err != nil {
		parts = append(parts, "release status: "+err.Error())
	} else if r, ok := st[volID]; ok {
		parts = append(parts, fmt.Sprintf("leader: %d attempts, last error %q, next try in %s",
			r.Attempts, r.LastError, time.Until(r.NextTry).Round(time.Millisecond)))
	} else {
		parts = append(parts, "leader: no release under way for the volume")
	}
	return strings.Join(parts, "; ")
}
