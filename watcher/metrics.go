package watcher

import (
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// Release steps, as metric labels.
const (
	stepNodeDetach       = "node_detach"
	stepControllerDetach = "controller_detach"
)

// countStep counts one attempt of a release step and, when it failed, one
// failure, by plugin and step.
func countStep(pluginID, step string, err error) {
	labels := []metrics.Label{{Name: "plugin", Value: pluginID}, {Name: "step", Value: step}}
	metrics.IncrCounterWithLabels([]string{"release", "attempts"}, 1, labels)
	if err != nil {
		metrics.IncrCounterWithLabels([]string{"release", "failures"}, 1, labels)
	}
}

// countFenced counts a claim released through the fence path: its node
// was lost, its lease ran out, and its node detach was skipped
// (claimd.release.fenced, by plugin).
func countFenced(pluginID string) {
	metrics.IncrCounterWithLabels([]string{"release", "fenced"}, 1, []metrics.Label{{Name: "plugin", Value: pluginID}})
}

// Stats is the leader's release work at one moment.
type Stats struct {
	// Enabled: this server leads and its workers run (all else is 0 when
	// not).
	Enabled bool
	// PendingEvals: volumes whose pending eval the workers are handling
	// (queued, running or waiting out a retry); a volume has at most one
	// pending eval.
	PendingEvals int
	// Queued: volumes waiting for a worker.
	Queued int
	// Backoff: volumes waiting out a retry delay after a failed pass.
	Backoff int
}

// Stats reports the release queue (cheap: one lock, one pass over the
// volumes in work).
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := Stats{Enabled: w.enabled, PendingEvals: len(w.vols), Queued: len(w.ready)}
	for _, v := range w.vols {
		if v.timer != nil {
			st.Backoff++
		}
	}
	return st
}

// releaseClock measures how long a past claim takes to be freed. Neither
// evals nor claims carry a wall-clock time (only Raft indexes), so the
// clock starts when this leader's watcher first sees the claim: at the time
// its volume was queued for the pass that first read it. That is the
// alloc's stop plus the commit of the eval plus the watch wake-up, a few
// milliseconds on a healthy leader, except for a claim that became past
// while its volume already had a pending eval in backoff (its clock starts
// at the retry) and after a leadership change (the new leader starts its
// clocks afresh). Leader memory only, like the retry state.
type releaseClock struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time // volume → alloc → first sight
}

func newReleaseClock() *releaseClock {
	return &releaseClock{seen: map[string]map[string]time.Time{}}
}

// observe starts the clock of every alloc's past claim not seen before.
func (c *releaseClock) observe(volID string, allocIDs []string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.seen[volID]
	if m == nil {
		m = map[string]time.Time{}
		c.seen[volID] = m
	}
	for _, id := range allocIDs {
		if _, ok := m[id]; !ok {
			m[id] = at
		}
	}
}

// freed records a claim's time to free and forgets it.
func (c *releaseClock) freed(volID, allocID, pluginID string) {
	c.mu.Lock()
	at, ok := c.seen[volID][allocID]
	delete(c.seen[volID], allocID)
	c.mu.Unlock()
	if ok {
		metrics.MeasureSinceWithLabels([]string{"release", "stop_to_freed"}, at,
			[]metrics.Label{{Name: "plugin", Value: pluginID}})
	}
}

// forget drops a volume whose release is done (no past claim left, or its
// evals failed for good: forced or deregistered claims never free here).
func (c *releaseClock) forget(volID string) {
	c.mu.Lock()
	delete(c.seen, volID)
	c.mu.Unlock()
}

func (c *releaseClock) reset() {
	c.mu.Lock()
	c.seen = map[string]map[string]time.Time{}
	c.mu.Unlock()
}
