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
// to come back (detach needs the node) or for an operator's -force, or,
// under node_lost fence, for the node's lease. A node that holds a lease is
// marked down no later than when its lease runs out on this leader's clock
// (structs.LeaseExpiry after the last heartbeat received): by then it has
// fenced itself, and a release must not wait for a heartbeat TTL longer
// than the lease (decision 39, the bound).
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
			h.resetLocked(n.ID, h.ttl+2*h.grace, n.Lease)
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
	// The node's lease bounds its timer: read before the lock (a state
	// read; the registration that set the lease committed before this).
	lease := h.nodeLease(nodeID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.enabled {
		if at.After(h.lastSeen[nodeID]) {
			h.lastSeen[nodeID] = at
		}
		h.resetLocked(nodeID, h.ttl+h.grace, lease)
	}
}

// nodeLease is the lease a node holds (0: none, or not known here).
func (h *Heartbeats) nodeLease(nodeID string) time.Duration {
	n, err := h.state.State().NodeByID(nil, nodeID)
	if err != nil || n == nil {
		return 0
	}
	return n.Lease
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

// resetLocked arms a node's timer to fire after d, or when its lease runs
// out on this leader's clock if that comes first (lease > 0).
func (h *Heartbeats) resetLocked(nodeID string, d, lease time.Duration) {
	if t, ok := h.timers[nodeID]; ok {
		t.Stop()
	}
	leaseRanOut := false
	if lease > 0 {
		from, ok := h.lastSeen[nodeID]
		if !ok {
			from = h.since
		}
		// LeaseExpiry takes the lease as run out at exactly from+this: the
		// timer fires no sooner, so the release it starts finds it so.
		if untilOut := time.Until(from.Add(structs.LeaseExpiry(lease))); untilOut < d {
			d, leaseRanOut = max(untilOut, 0), true
		}
	}
	h.gen++
	gen := h.gen
	h.timers[nodeID] = time.AfterFunc(d, func() { h.expire(nodeID, gen, leaseRanOut) })
	h.gens[nodeID] = gen
}

// expire marks the node down, unless the timer that fired was replaced by
// a heartbeat that raced with it. leaseRanOut: it fired for the node's
// lease, before the heartbeat TTL.
func (h *Heartbeats) expire(nodeID string, gen uint64, leaseRanOut bool) {
	h.mu.Lock()
	if !h.enabled || h.gens[nodeID] != gen {
		h.mu.Unlock()
		return
	}
	delete(h.timers, nodeID)
	delete(h.gens, nodeID)
	h.mu.Unlock()
	if leaseRanOut {
		h.logger.Warn("node's lease ran out before its heartbeat TTL; marking it down", "node", nodeID)
	} else {
		h.logger.Warn("node missed its heartbeat; marking it down", "node", nodeID)
	}
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
			h.resetLocked(nodeID, h.grace, 0)
		}
		h.mu.Unlock()
	}
}
