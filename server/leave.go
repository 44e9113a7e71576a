package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
)

// Leave removes this server from the Raft configuration, handing leadership
// over first if it leads, then shuts it down. The remaining servers keep
// their quorum arithmetic right instead of counting a dead member.
func (s *Server) Leave(timeout time.Duration) error {
	s.leaving.Store(true) // this removal is wanted: do not join again
	deadline := time.Now().Add(timeout)
	r := s.raft.Raft
	if r.State() == raft.Leader {
		if n := s.voters(); n > 1 {
			if err := r.LeadershipTransfer().Error(); err != nil {
				s.logger.Warn("leadership transfer before leave failed", "error", err)
			}
		}
	}
	if s.voters() > 1 {
		// Ask the leader to remove us until it says it has (or that we are
		// gone already). Our own view is no proof: once the removal commits
		// the leader may stop replicating to us before we see it. With no
		// other leader for leaveNoLeaderGrace, the other servers are gone
		// (stopped together, or this is the last one): nobody can commit
		// the removal, so say so and stop now rather than wait it out.
		var leaderless time.Time
		for {
			if time.Now().After(deadline) {
				return fmt.Errorf("leave: not removed from the configuration after %s", timeout)
			}
			addr, _ := r.LeaderWithID()
			if addr == "" || string(addr) == s.addr {
				if leaderless.IsZero() {
					leaderless = time.Now()
				}
				if time.Since(leaderless) > leaveNoLeaderGrace {
					s.logger.Warn("leave: no other server leads to remove this one (the others are stopped or unreachable); stopping without leaving",
						"voters", s.voters())
					return s.Shutdown()
				}
			} else {
				leaderless = time.Time{}
			}
			if addr != "" && string(addr) != s.addr {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var resp structs.GenericResponse
				err := s.pool.RPC(ctx, string(addr), "Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: s.id, WriteRequest: structs.WriteRequest{AuthToken: s.serverToken()}}, &resp)
				cancel()
				if err == nil || errors.Is(err, structs.ErrNotFound) {
					break
				}
				s.logger.Warn("leave: remove request failed; retrying", "error", err)
			}
			time.Sleep(100 * time.Millisecond) // retry pacing, not synchronisation
		}
		s.logger.Info("left the cluster")
	}
	return s.Shutdown()
}

// leaveNoLeaderGrace is how long a leaving server waits for another
// leader before it concludes nobody can remove it: longer than an
// election at production timings.
const leaveNoLeaderGrace = 3 * time.Second

func (s *Server) voters() int {
	f := s.raft.Raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	n := 0
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

func (s *Server) inConfig() bool {
	f := s.raft.Raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == s.id {
			return true
		}
	}
	return false
}
