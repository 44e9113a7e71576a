package server

import (
	"github.com/hashicorp/raft"
	"io"
	"strconv"
	"sync/atomic"

	"github.com/claimd/claimd/fsm"
)

// observedFSM counts snapshot restores that happen while the server runs
// (installed from the leader), as opposed to the restore of the local
// snapshot at start-up. Operators and tests read it to tell how a server
// caught up.
type observedFSM struct {
	*fsm.FSM
	running     atomic.Bool
	restores    atomic.Int64
	beforeApply func(index uint64)
}

func (o *observedFSM) Apply(l *raft.Log) any {
	if o.beforeApply != nil {
		o.beforeApply(l.Index)
	}
	return o.FSM.Apply(l)
}

func (o *observedFSM) Restore(rc io.ReadCloser) error {
	if o.running.Load() {
		o.restores.Add(1)
	}
	return o.FSM.Restore(rc)
}

// RestoreCount is how many snapshots this server installed from a leader
// since it started.
func (s *Server) RestoreCount() int64 { return s.observed.restores.Load() }

// LastSnapshotIndex is the index of this server's newest snapshot (0 = none).
func (s *Server) LastSnapshotIndex() uint64 {
	n, _ := strconv.ParseUint(s.raft.Raft.Stats()["last_snapshot_index"], 10, 64)
	return n
}
