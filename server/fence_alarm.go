package server

import (
	"fmt"
	"sync"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// Failed fences (issue 39) are loud where operators look: the volume
// shows them (the state machine records them, structs.FenceFailure), the
// gauge claimd.fence.failed counts the volumes that have one, and the
// leader logs each at ERROR once per term, so that a log alert fires
// whichever server leads when it is reported.

// fenceAlarm remembers which failures this leader has logged: key
// volume/node/alloc → the report's Raft index (a new report of the same
// claim is logged again).
type fenceAlarm struct {
	mu     sync.Mutex
	logged map[string]uint64
}

// checkFenceFailures sets the gauge from this server's state and, on the
// leader, logs the failures it has not logged yet. Called with the gauges.
func (s *Server) checkFenceFailures() {
	vols, err := s.State().VolumesWithFenceFailures(nil)
	if err != nil {
		return
	}
	metrics.SetGauge([]string{"fence", "failed"}, float32(len(vols)))
	a := &s.fenceAlarm
	a.mu.Lock()
	defer a.mu.Unlock()
	if !s.IsLeader() {
		a.logged = nil // a later term logs them all again
		return
	}
	seen := make(map[string]uint64)
	for _, v := range vols {
		for _, f := range v.FenceFailures {
			key := v.ID + "/" + f.NodeID + "/" + f.AllocID
			seen[key] = f.ReportIndex
			if idx, ok := a.logged[key]; ok && idx == f.ReportIndex {
				continue
			}
			s.logger.Error(fmt.Sprintf("volume %s may still be written on node %s: its fence failed", v.ID, f.NodeID),
				"volume", v.ID, "node", f.NodeID, "alloc", f.AllocID, "what", f.What(),
				"fence_started", f.FencedAt, "report_index", f.ReportIndex)
		}
	}
	a.logged = seen
}
