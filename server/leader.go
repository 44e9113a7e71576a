package server

import (
	"time"
)

// barrierTimeout bounds the wait for the new leader to apply every entry
// committed before it won; duties must not start on a stale FSM.
const barrierTimeout = time.Minute

// monitorLeadership turns leader duties on and off as Raft reports
// leadership changes. It is the only goroutine that calls SetEnabled.
func (s *Server) monitorLeadership() {
	var stopLeading chan struct{}
	var leading chan struct{} // closed when the leader loop exits
	stop := func() {
		if stopLeading != nil {
			close(stopLeading)
			<-leading
			stopLeading, leading = nil, nil
		}
	}
	defer stop()
	for {
		select {
		case isLeader := <-s.raft.LeaderCh:
			if isLeader {
				if stopLeading != nil {
					continue
				}
				stopLeading, leading = make(chan struct{}), make(chan struct{})
				go s.leaderLoop(stopLeading, leading)
			} else {
				stop()
			}
		case <-s.shutdownCh:
			return
		}
	}
}

// leaderLoop establishes leadership (Barrier, then duties on) and keeps it
// until stopped.
func (s *Server) leaderLoop(stopCh, done chan struct{}) {
	defer close(done)
	s.logger.Info("won leadership; waiting for barrier")
	for {
		// Wait for the barrier, but not past losing leadership or shutdown:
		// a future still queued when Raft stops is never answered.
		f := s.raft.Raft.Barrier(barrierTimeout)
		res := make(chan error, 1)
		go func() { res <- f.Error() }()
		var err error
		select {
		case err = <-res:
		case <-stopCh:
			return
		case <-s.shutdownCh:
			return
		}
		if err == nil {
			break
		}
		s.logger.Warn("barrier failed", "error", err)
		select {
		case <-stopCh:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.setDuties(true)
	s.logger.Info("leadership established")
	<-stopCh
	s.setDuties(false)
	s.logger.Info("leadership lost; leader duties stopped")
}

func (s *Server) setDuties(enabled bool) {
	s.dutiesMu.Lock()
	duties := append([]LeaderDuty(nil), s.leaderDuties...)
	s.dutiesMu.Unlock()
	for _, d := range duties {
		d.SetEnabled(enabled)
	}
}
