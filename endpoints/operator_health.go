package endpoints

import (
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/version"
)

// RaftHealth reports every server's contact with the leader, log lag and
// health verdict, as the leader's autopilot last saw them. Always answered
// by the leader (only it watches the others), so a stale read is not
// offered.
func (o *Operator) RaftHealth(args *structs.GenericRequest, reply *structs.RaftHealthResponse) error {
	args.AllowStale = false
	_, done, err := o.auth.gate("Operator.RaftHealth", args, reply, nil)
	if done {
		return err
	}
	h, err := o.srv.RaftHealth()
	if err != nil {
		return err
	}
	*reply = *h
	return nil
}

// RaftStats answers the leader's health check with this server's own Raft
// view (never forwarded). Only servers call it.
func (s *Status) RaftStats(args *structs.EmptyArgs, reply *structs.RaftStats) error {
	if _, err := s.auth.check("Status.RaftStats", args); err != nil {
		return err
	}
	*reply = LocalRaftStats(s.srv.Raft())
	return nil
}

// LocalRaftStats is one server's view of its log and leader: the leader
// uses it for itself, Status.RaftStats for everyone else.
func LocalRaftStats(r *raft.Raft) structs.RaftStats {
	// Index and term come from one read of the last log entry (Stats), the
	// same source autopilot compares them with on the leader.
	st := r.Stats()
	out := structs.RaftStats{AppliedIndex: r.AppliedIndex(), Version: version.Short(), Features: structs.EntryFeatures}
	out.LastIndex, _ = strconv.ParseUint(st["last_log_index"], 10, 64)
	out.LastTerm, _ = strconv.ParseUint(st["last_log_term"], 10, 64)
	switch last := r.LastContact(); {
	case r.State() == raft.Leader:
		out.LastContact = 0
	case last.IsZero():
		out.LastContact = -1
	default:
		out.LastContact = time.Since(last)
	}
	return out
}
