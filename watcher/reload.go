package watcher

import "time"

// Settings an operator may change on a running leader (SIGHUP with a new
// configuration file). Each is safe to call from any goroutine at any
// time, enabled or not; a value <= 0 keeps the current one.

// SetBackoff changes the release retry delays. A retry already scheduled
// keeps its timer; the next failure uses the new values.
func (w *Watcher) SetBackoff(base, maxDelay time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if base > 0 {
		w.cfg.BackoffBase = base
	}
	if maxDelay > 0 {
		w.cfg.BackoffMax = maxDelay
	}
}

// SetGCInterval changes how often the claim GC runs; a running GC loop
// restarts its ticker at once.
func (w *Watcher) SetGCInterval(d time.Duration) {
	if d <= 0 {
		return
	}
	w.mu.Lock()
	w.cfg.GCInterval = d
	w.mu.Unlock()
	select {
	case w.gcReset <- struct{}{}:
	default: // a reset is already pending; it reads the newest value
	}
}

func (w *Watcher) gcInterval() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.GCInterval
}

// SetTTL changes the heartbeat TTL and grace. Running timers keep their
// deadlines; each node's next heartbeat arms its timer with the new TTL
// (and the node is told it in that heartbeat's reply).
func (h *Heartbeats) SetTTL(ttl, grace time.Duration) {
	if ttl <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ttl, h.grace = ttl, grace
}

// TTL is how soon a node must heartbeat.
func (h *Heartbeats) TTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ttl
}
