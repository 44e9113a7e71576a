package server

import (
	"time"

	"github.com/claimd/claimd/forward"
	"github.com/claimd/claimd/structs"
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
				// The tenure starts now: a new leader's hold-off counts
				// from here (decision 46).
				s.lease.Won()
				// Entries after this index are this tenure's (or, in a
				// race, taken for an earlier one: the safe direction).
				tenureStart := s.raft.Raft.LastIndex()
				stopLeading, leading = make(chan struct{}), make(chan struct{})
				go s.leaderLoop(stopLeading, leading, tenureStart)
			} else {
				s.lease.Lost()
				stop()
			}
		case <-s.shutdownCh:
			// The tenure ends with the server: calls waiting out its
			// hold-off fail now, so the duties (stopped by the deferred
			// stop) are not held up until the hold-off's end.
			s.lease.Lost()
			return
		}
	}
}

// leaderLoop establishes leadership (Barrier, then duties on) and keeps it
// until stopped.
func (s *Server) leaderLoop(stopCh, done chan struct{}, tenureStart uint64) {
	defer close(done)
	s.logger.Info("won leadership; waiting for barrier")
	for {
		// Wait for the barrier, but not past losing leadership or shutdown:
		// a future still queued when Raft stops is never answered.
		mark := s.lease.Mark()
		f := s.raft.Raft.Barrier(barrierTimeout)
		res := make(chan error, 1)
		go func() { res <- f.Error() }()
		var err error
		select {
		case err = <-res:
			if err == nil {
				s.lease.Confirmed(mark)
			}
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
	if s.noEarlierStorageCalls(tenureStart) {
		s.lease.WaiveHoldoff()
	}
	s.ensureServerToken(stopCh)
	s.setReadsReady(true)
	s.setDuties(true)
	s.logger.Info("leadership established")
	<-stopCh
	s.setReadsReady(false)
	s.setDuties(false)
	s.logger.Info("leadership lost; leader duties stopped")
}

// noEarlierStorageCalls: a storage call goes to a registered node, so
// when every node in the state registered in this tenure (after
// tenureStart), no earlier leader can have a call in flight and this
// tenure need not hold off (a new cluster's first leader, a dev agent).
func (s *Server) noEarlierStorageCalls(tenureStart uint64) bool {
	nodes, err := s.fsm.State().Nodes(nil)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if n.CreateIndex <= tenureStart {
			return false
		}
	}
	return true
}

func (s *Server) setDuties(enabled bool) {
	s.dutiesMu.Lock()
	duties := append([]LeaderDuty(nil), s.leaderDuties...)
	s.dutiesMu.Unlock()
	for _, d := range duties {
		d.SetEnabled(enabled)
	}
}

// confirmLeadership proves to the storage lease that this server leads:
// a Barrier appends an entry and returns once it is committed (decision
// 45). VerifyLeader would not do: a heartbeat answer sent before the
// verification started can count towards it.
func (s *Server) confirmLeadership() error {
	f := s.raft.Raft.Barrier(forward.HoldTimeout)
	res := make(chan error, 1)
	go func() { res <- f.Error() }()
	select {
	case err := <-res:
		return err
	case <-s.shutdownCh:
		return structs.ErrShutdown
	}
}

// verifyLeader confirms with a quorum that this server still leads. A
// leader cut off or paused (SIGSTOP) believes it leads until its lease runs
// out, and a read it served meanwhile could miss what a new leader
// committed; the check costs one heartbeat round, no disk write.
func (s *Server) verifyLeader() error {
	f := s.raft.Raft.VerifyLeader()
	res := make(chan error, 1)
	go func() { res <- f.Error() }()
	select {
	case err := <-res:
		if err != nil {
			return structs.NewError(structs.CodeNoLeader, "this server could not confirm it still leads: "+err.Error())
		}
		return nil
	case <-s.shutdownCh:
		return structs.ErrShutdown
	}
}

// setReadsReady opens consistent reads on this server (it leads and its
// barrier has applied every entry committed before it won) or closes them
// again (it lost leadership).
func (s *Server) setReadsReady(ready bool) {
	s.readsMu.Lock()
	defer s.readsMu.Unlock()
	select {
	case <-s.readsReady:
		if !ready {
			s.readsReady = make(chan struct{})
		}
	default:
		if ready {
			close(s.readsReady)
		}
	}
}

// WaitConsistentReads implements endpoints.Reader. A leader newly elected
// may not have applied what earlier leaders committed (a server that
// restarted replays its log only once it learns the commit index), and a
// read served from that state would go back in time: the chaos suite saw a
// read after a leadership transfer return a claim released 24 s before.
// So a consistent read waits for this server's barrier; a server that does
// not lead, or whose barrier takes longer than the hold, answers no_leader
// (retryable: nothing was read).
func (s *Server) WaitConsistentReads() error {
	timeout := time.NewTimer(forward.HoldTimeout)
	defer timeout.Stop()
	for {
		changed := s.LeaderChanged()
		if _, self := s.Leader(); !self {
			return structs.NewError(structs.CodeNoLeader, "this server does not lead: a consistent read must go to the leader")
		}
		s.readsMu.Lock()
		ready := s.readsReady
		s.readsMu.Unlock()
		select {
		case <-ready:
			return s.verifyLeader()
		case <-changed:
		case <-timeout.C:
			return structs.NewError(structs.CodeNoLeader, "the leader is still applying entries committed before it won; retry")
		case <-s.shutdownCh:
			return structs.ErrShutdown
		}
	}
}
