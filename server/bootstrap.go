package server

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
)

// bootstrapper implements bootstrap-expect without a gossip layer: servers
// exchange identities (Status.Hello) with their join addresses and pass on
// whom they know. The cluster bootstraps once a server knows exactly
// BootstrapExpect servers that all have empty logs and the same expectation;
// each of them then holds the same list, so all bootstrap with the same
// configuration. A server that learns of an existing cluster asks the leader
// to add it instead.
type bootstrapper struct {
	s *Server

	mu           sync.Mutex
	known        map[string]structs.ServerInfo // by ID, including self
	bootstrapped bool
	joined       bool
	wake         chan struct{}

	// Used by run only: when this server started, and its last join request.
	started, lastJoin time.Time
}

func newBootstrapper(s *Server) *bootstrapper {
	b := &bootstrapper{s: s, known: map[string]structs.ServerInfo{}, wake: make(chan struct{}, 1), started: time.Now()}
	b.known[s.id] = s.Self()
	return b
}

// hello records the caller and answers with what this server knows.
func (b *bootstrapper) hello(req *structs.HelloRequest) *structs.HelloResponse {
	if req.From.ID != "" && req.From.ID != b.s.id {
		b.learn(req.From)
	}
	leader, _ := b.s.raft.Raft.LeaderWithID()
	resp := &structs.HelloResponse{Self: b.s.Self(), Leader: string(leader)}
	b.mu.Lock()
	for _, info := range b.known {
		resp.Known = append(resp.Known, info)
	}
	b.mu.Unlock()
	sort.Slice(resp.Known, func(i, j int) bool { return resp.Known[i].ID < resp.Known[j].ID })
	return resp
}

// learn merges one server's identity and wakes the join loop on news.
func (b *bootstrapper) learn(info structs.ServerInfo) {
	if info.ID == "" || info.ID == b.s.id {
		return
	}
	b.mu.Lock()
	old, ok := b.known[info.ID]
	b.known[info.ID] = info
	b.mu.Unlock()
	if !ok || old != info {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

func (b *bootstrapper) name(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.known[id].Name
}

// run retries the join addresses until this server is part of a cluster,
// and keeps checking that it stays one: a server the cluster removed while
// it was away (remove-peer, dead-server cleanup) may hear from the leader
// once more after it is back and learn of its removal only later, or never
// hear from a leader again while its own configuration still lists it; in
// both cases it asks to be added again. It stops when the server leaves.
func (b *bootstrapper) run() {
	s := b.s
	if s.cfg.BootstrapExpect == 1 && !s.hasState() {
		b.bootstrap([]structs.ServerInfo{s.Self()})
	}
	member := false
	for {
		if s.leaving.Load() {
			return
		}
		if b.done() {
			if !member {
				s.logger.Info("cluster membership confirmed")
			}
			member = true
		} else {
			member = false
			clusterAt, clusterLeads := b.exchange()
			// A new server, or one that was removed, asks to be added; a
			// member restarted on its data dir waits for a leader, unless
			// the cluster has one it has not heard from for two heartbeat
			// timeouts (RaftJoin leaves a member already in the
			// configuration alone). At most one request per JoinInterval.
			stranded := clusterLeads && !b.leaderKnown() && b.unheardFor() > 2*s.raft.Raft.ReloadableConfig().HeartbeatTimeout
			if clusterAt != "" && !s.leaving.Load() && (!s.inConfig() || stranded) {
				if time.Since(b.lastJoin) >= s.cfg.JoinInterval {
					b.lastJoin = time.Now()
					b.joinCluster(clusterAt)
				}
			} else {
				b.maybeBootstrap()
			}
		}
		select {
		case <-b.wake:
		case <-time.After(s.cfg.JoinInterval):
		case <-s.shutdownCh:
			return
		}
	}
}

// done: this server has a leader and is in its configuration.
func (b *bootstrapper) done() bool {
	return b.leaderKnown() && b.s.inConfig()
}

func (b *bootstrapper) leaderKnown() bool {
	addr, _ := b.s.raft.Raft.LeaderWithID()
	return addr != ""
}

// unheardFor is how long this server has not heard from a leader (since it
// started, if it never has).
func (b *bootstrapper) unheardFor() time.Duration {
	last := b.s.raft.Raft.LastContact()
	if last.Before(b.started) {
		last = b.started
	}
	return time.Since(last)
}

// exchange says hello to every join address and returns the address of a
// server that belongs to a formed cluster, if any answered so, and whether
// one of them knows a leader.
func (b *bootstrapper) exchange() (clusterAt string, clusterLeads bool) {
	s := b.s
	self := s.Self()
	b.mu.Lock()
	b.known[s.id] = self
	b.mu.Unlock()
	for _, addr := range s.cfg.Join {
		if addr == s.addr {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var resp structs.HelloResponse
		err := s.pool.RPC(ctx, addr, "Status.Hello", &structs.HelloRequest{From: self}, &resp)
		cancel()
		if err != nil {
			s.logger.Debug("join address not answering", "addr", addr, "error", err)
			continue
		}
		b.learn(resp.Self)
		for _, info := range resp.Known {
			b.learn(info)
		}
		if resp.Self.HasState || resp.Leader != "" {
			clusterAt = addr
		}
		clusterLeads = clusterLeads || resp.Leader != ""
	}
	return clusterAt, clusterLeads
}

// joinCluster asks an existing cluster (through any of its servers, which
// forwards to the leader) to add this server.
func (b *bootstrapper) joinCluster(addr string) {
	s := b.s
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var resp structs.GenericResponse
	err := s.pool.RPC(ctx, addr, "Operator.RaftJoin", &structs.RaftJoinRequest{Server: s.Self()}, &resp)
	if err != nil {
		s.logger.Warn("join of existing cluster failed; will retry", "via", addr, "error", err)
		return
	}
	b.mu.Lock()
	b.joined = true
	b.mu.Unlock()
	s.logger.Info("asked the cluster to add this server", "via", addr, "index", resp.Index)
}

// maybeBootstrap bootstraps when exactly BootstrapExpect servers with empty
// logs and the same expectation know each other.
func (b *bootstrapper) maybeBootstrap() {
	s := b.s
	expect := s.cfg.BootstrapExpect
	if expect == 0 || s.hasState() {
		return
	}
	b.mu.Lock()
	if b.bootstrapped {
		b.mu.Unlock()
		return
	}
	var servers []structs.ServerInfo
	for _, info := range b.known {
		servers = append(servers, info)
	}
	b.mu.Unlock()
	for _, info := range servers {
		if info.HasState {
			// A cluster exists; joining it is exchange's job.
			return
		}
		if info.BootstrapExpect != expect {
			s.logger.Error("servers disagree on -bootstrap-expect; not bootstrapping",
				"mine", expect, "server", info.Name, "theirs", info.BootstrapExpect)
			return
		}
	}
	switch {
	case len(servers) < expect:
		s.logger.Debug("waiting for servers before bootstrapping", "known", len(servers), "expect", expect)
	case len(servers) > expect:
		s.logger.Error("more servers than -bootstrap-expect know each other; not bootstrapping",
			"known", len(servers), "expect", expect)
	default:
		b.bootstrap(servers)
	}
}

func (b *bootstrapper) bootstrap(servers []structs.ServerInfo) {
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	var conf []raft.Server
	for _, info := range servers {
		conf = append(conf, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(info.ID), Address: raft.ServerAddress(info.Addr)})
	}
	if err := b.s.raft.Bootstrap(conf); err != nil {
		b.s.logger.Error("bootstrap failed", "error", err)
		return
	}
	b.mu.Lock()
	b.bootstrapped = true
	b.mu.Unlock()
	b.s.logger.Info("bootstrapped cluster", "servers", len(conf))
}
