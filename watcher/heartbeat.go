package watcher

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/structs"
)

// Heartbeats keeps one timer per ready node on the leader. A node whose
// timer fires is marked down through Raft; the state machine then makes its
// allocations lost and their claims past. Their release waits for the node
// to come back (detach needs the node) or for an operator's -force.
type Heartbeats struct {
	state  StateSource
	apply  Applier
	ttl    time.Duration
	grace  time.Duration
	logger hclog.Logger

	mu      sync.Mutex
	enabled bool
	timers  map[string]*time.Timer
	gens    map[string]uint64 // the generation of each node's live timer
	gen     uint64
	// lastSeen is when this leader last received each node's heartbeat
	// (monotonic); since is when it took office, the start of the lease
	// clock of a node it has not heard from (decision 39).
	lastSeen map[string]time.Time
	since    time.Time
}

// NewHeartbeats makes disabled heartbeat timers. ttl is what nodes are told;
// grace is added on top, and again at leadership change so that nodes have
// time to find the new leader before any is marked down.
func NewHeartbeats(state StateSource, apply Applier, ttl, grace time.Duration, logger hclog.Logger) *Heartbeats {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Heartbeats{state: state, apply: apply, ttl: ttl, grace: grace, logger: logger.Named("heartbeat"), timers: map[string]*time.Timer{}, gens: map[string]uint64{}, lastSeen: map[string]time.Time{}}
}

// SetEnabled starts a timer for every ready node (TTL plus twice the grace:
// the nodes may be looking for the new leader) or stops all timers.
func (h *Heartbeats) SetEnabled(enabled bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if enabled == h.enabled {
		return
	}
	h.enabled = enabled
	for _, t := range h.timers {
		t.Stop()
	}
	h.timers = map[string]*time.Timer{}
	h.gens = map[string]uint64{}
	h.lastSeen = map[string]time.Time{}
	if !enabled {
		return
	}
	h.since = time.Now()
	nodes, err := h.state.State().Nodes(nil)
	if err != nil {
		h.logger.Error("reading nodes", "error", err)
		return
	}
	for _, n := range nodes {
		if n.Status == structs.NodeStatusReady {
			h.resetLocked(n.ID, h.ttl+2*h.grace)
		}
	}
}

// Remove forgets a node's timer (the node was deregistered).
func (h *Heartbeats) Remove(nodeID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.timers[nodeID]; ok {
		t.Stop()
		delete(h.timers, nodeID)
		delete(h.gens, nodeID)
	}
	delete(h.lastSeen, nodeID)
}

// Reset restarts a node's timer after it heartbeats (leader only).
func (h *Heartbeats) Reset(nodeID string) {
	h.Received(nodeID, time.Now())
}

// Received restarts a node's timer and its lease clock for a heartbeat
// received at at (leader only). The caller takes at before anything else
// of the heartbeat's handling: the lease argument needs the receive time,
// not a later one.
func (h *Heartbeats) Received(nodeID string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.enabled {
		h.resetLocked(nodeID, h.ttl+h.grace)
		if at.After(h.lastSeen[nodeID]) {
			h.lastSeen[nodeID] = at
		}
	}
}

// LeaseExpiry says when this leader takes the node's lease as run out:
// structs.LeaseExpiry(lease) after the last heartbeat it received from the
// node, or after it took office if it has received none. expired is false
// while that time is still ahead, and always on a follower (only the
// leader's clock counts; a new leader starts counting afresh).
func (h *Heartbeats) LeaseExpiry(nodeID string, lease time.Duration) (at time.Time, expired bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.enabled || lease <= 0 {
		return time.Time{}, false
	}
	from, ok := h.lastSeen[nodeID]
	if !ok {
		from = h.since
	}
	at = from.Add(structs.LeaseExpiry(lease))
	return at, !time.Now().Before(at)
}

func (h *Heartbeats) resetLocked(nodeID string, d time.Duration) {
	if t, ok := h.timers[nodeID]; ok {
		t.Stop()
	}
	h.gen++
	gen := h.gen
	h.timers[nodeID] = time.AfterFunc(d, func() { h.expire(nodeID, gen) })
	h.gens[nodeID] = gen
}

// expire marks the node down, unless the timer that fired was replaced by
// a heartbeat that raced with it.
func (h *Heartbeats) expire(nodeID string, gen uint64) {
	h.mu.Lock()
	if !h.enabled || h.gens[nodeID] != gen {
		h.mu.Unlock()
		return
	}
	delete(h.timers, nodeID)
	delete(h.gens, nodeID)
	h.mu.Unlock()
	h.logger.Warn("node missed its heartbeat; marking it down", "node", nodeID)
	metrics.IncrCounter([]string{"heartbeat", "missed"}, 1)
	req := &structs.NodeUpdateStatusRequest{NodeID: nodeID, Status: structs.NodeStatusDown}
	_, _, err := h.apply.Apply(structs.NodeUpdateStatusRequestType, req)
	if errors.Is(err, structs.ErrNotFound) {
		return // deregistered meanwhile: nothing to mark down
	}
	if err != nil {
		h.logger.Error("marking node down failed; will retry", "node", nodeID, "error", err)
		h.mu.Lock()
		if h.enabled {
			h.resetLocked(nodeID, h.grace)
		}
		h.mu.Unlock()
	}
}
