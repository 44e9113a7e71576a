package server

import "time"

// Settings the agent changes on SIGHUP without a restart. Safe from any
// goroutine; a value <= 0 keeps the current one. They take effect on this
// server whenever it leads (followers keep them for their turn).

// SetHeartbeatTTL changes the TTL client nodes are told, and the grace
// (half the TTL) the leader adds before it marks a node down. Each node
// learns the new TTL in its next heartbeat's reply.
func (s *Server) SetHeartbeatTTL(d time.Duration) {
	s.beats.SetTTL(d, d/2)
}

// SetClaimGCInterval changes how often the leader's claim GC runs.
func (s *Server) SetClaimGCInterval(d time.Duration) {
	s.watcher.SetGCInterval(d)
}

// SetReconcileInterval changes how often the leader reconciles each
// plugin's storage with the record (negative: only on demand).
func (s *Server) SetReconcileInterval(d time.Duration) {
	if d == 0 {
		return
	}
	s.reconciler.SetInterval(d)
}

// SetReleaseBackoff changes the release retry delays.
func (s *Server) SetReleaseBackoff(base, maxDelay time.Duration) {
	s.watcher.SetBackoff(base, maxDelay)
}
