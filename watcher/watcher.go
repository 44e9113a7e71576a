package watcher

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	memdb "github.com/hashicorp/go-memdb"
	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/structs"
)

// Defaults. Backoff from 1 s doubling to 1 min: a plugin restart takes
// seconds, an outage can take hours, and at 1 min a thousand stuck volumes
// cost under 20 RPCs a second. Workers: a release spends most of its time
// waiting on a node and on Raft, so many volumes changing hands at once
// (a node drained, a job stopped) finish together only when most of them
// are in flight together: 64 halved the spread of a 100-volume handoff
// against 16 (issue 41); a plugin's controller still takes only as many
// detaches at once as it allows (decision 57).
const (
	DefaultWorkers     = 64
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = time.Minute
	DefaultGCInterval  = 5 * time.Minute
)

// Config configures a Watcher.
type Config struct {
	Workers     int
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// GCInterval is how often the claim GC looks for past claims with no
	// pending eval.
	GCInterval time.Duration
	Logger     hclog.Logger
}

// Watcher releases past claims. It runs only while enabled (on the leader).
type Watcher struct {
	cfg    Config
	logger hclog.Logger
	state  StateSource
	apply  Applier
	attach Attachments
	clock  *releaseClock
	leases LeaseClock // nil: no lease ever runs out (no fencing)

	mu      sync.Mutex
	enabled bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	vols    map[string]*volumeWork
	ready   []string      // volumes waiting for a worker, FIFO
	kick    chan struct{} // wakes a worker when ready grows
	gcNow   chan chan int // claim GC requests; the reply is evals created
	gcReset chan struct{} // the GC interval changed (SetGCInterval)
}

// volumeWork is the leader's memory of one volume's release.
type volumeWork struct {
	queued, running, dirty bool
	// queuedAt: when it was last queued (starts the release clock of the
	// past claims that pass finds).
	queuedAt time.Time
	status   structs.ReleaseStatus
	timer    *time.Timer
}

// New makes a disabled watcher.
func New(cfg Config, state StateSource, apply Applier, attach Attachments) *Watcher {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Watcher{
		cfg: cfg, logger: cfg.Logger.Named("watcher"), state: state, apply: apply, attach: attach,
		clock: newReleaseClock(), vols: map[string]*volumeWork{}, gcReset: make(chan struct{}, 1),
	}
}

// SetLeases gives the watcher the leader's lease clock; without one,
// fence-policy claims of lost nodes wait like wait-policy ones.
func (w *Watcher) SetLeases(l LeaseClock) { w.leases = l }

// SetEnabled starts the workers (re-scanning every pending eval) or stops
// them and forgets the retry state. Called by the server's leadership loop.
func (w *Watcher) SetEnabled(enabled bool) {
	w.mu.Lock()
	if enabled == w.enabled {
		w.mu.Unlock()
		return
	}
	w.enabled = enabled
	if !enabled {
		w.cancel()
		for _, v := range w.vols {
			if v.timer != nil {
				v.timer.Stop()
			}
		}
		w.mu.Unlock()
		w.wg.Wait()
		w.mu.Lock()
		w.vols, w.ready = map[string]*volumeWork{}, nil
		w.mu.Unlock()
		w.clock.reset()
		w.logger.Info("release workers stopped")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.vols = map[string]*volumeWork{}
	w.ready = nil
	w.kick = make(chan struct{}, 1)
	w.gcNow = make(chan chan int)
	for i := 0; i < w.cfg.Workers; i++ {
		w.goFunc(func() { w.worker(ctx) })
	}
	w.goFunc(func() { w.watchEvals(ctx) })
	w.goFunc(func() { w.claimGCLoop(ctx) })
	w.mu.Unlock()
	w.logger.Info("release workers started", "workers", w.cfg.Workers)
}

func (w *Watcher) goFunc(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

// Status returns the retry state of volumes being released (leader only;
// empty when disabled).
func (w *Watcher) Status() map[string]structs.ReleaseStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]structs.ReleaseStatus, len(w.vols))
	for id, v := range w.vols {
		if v.status.Attempts > 0 {
			out[id] = v.status
		}
	}
	return out
}

// enqueue schedules a volume. force skips a pending backoff (an operator
// asked); otherwise a volume in backoff waits for its timer, so that a
// burst of unrelated changes cannot turn retries into a hot loop.
func (w *Watcher) enqueue(volID string, force bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.enabled {
		return
	}
	v := w.vols[volID]
	if v == nil {
		v = &volumeWork{}
		w.vols[volID] = v
	}
	switch {
	case v.running:
		v.dirty = true
		return
	case v.queued:
		return
	case v.timer != nil && !force:
		return
	}
	if v.timer != nil {
		v.timer.Stop()
		v.timer = nil
	}
	v.queued, v.queuedAt = true, time.Now()
	w.ready = append(w.ready, volID)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// next takes the next queued volume, with the time it was queued.
func (w *Watcher) next(ctx context.Context) (string, time.Time, bool) {
	for {
		w.mu.Lock()
		if len(w.ready) > 0 {
			id := w.ready[0]
			w.ready = w.ready[1:]
			v := w.vols[id]
			v.queued, v.running, v.dirty = false, true, false
			more := len(w.ready) > 0
			w.mu.Unlock()
			if more {
				select {
				case w.kick <- struct{}{}:
				default:
				}
			}
			return id, v.queuedAt, true
		}
		w.mu.Unlock()
		select {
		case <-w.kick:
		case <-ctx.Done():
			return "", time.Time{}, false
		}
	}
}

func (w *Watcher) worker(ctx context.Context) {
	for {
		volID, queuedAt, ok := w.next(ctx)
		if !ok {
			return
		}
		err := w.releaseVolume(volID, queuedAt)
		if err == nil {
			err = w.completeEvals(volID, structs.EvalStatusComplete, "")
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			w.logger.Warn("release failed permanently", "volume", volID, "evals", w.pendingEvalIDs(volID), "reason", perm.reason)
			err = w.completeEvals(volID, structs.EvalStatusFailed, perm.reason)
		}
		w.finish(ctx, volID, err)
	}
}

// finish records the outcome: forget a volume that is done, or schedule a
// retry with capped exponential backoff and full jitter.
func (w *Watcher) finish(ctx context.Context, volID string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.vols[volID]
	if v == nil {
		return
	}
	v.running = false
	if ctx.Err() != nil {
		return
	}
	if err == nil {
		if v.dirty {
			v.queued, v.queuedAt = true, time.Now()
			w.ready = append(w.ready, volID)
			select {
			case w.kick <- struct{}{}:
			default:
			}
			return
		}
		if v.status.Attempts > 0 {
			w.logger.Info("volume released after retries", "volume", volID, "attempts", v.status.Attempts+1)
		}
		delete(w.vols, volID)
		w.clock.forget(volID)
		return
	}
	v.status.Attempts++
	v.status.LastError = err.Error()
	delay := w.backoff(v.status.Attempts)
	// A release waiting for a lease to run out tries again right then,
	// not on its backoff: the stated bound of a move (decision 39)
	// should not include a backoff step.
	var lw *leaseWait
	if errors.As(err, &lw) {
		delay = min(delay, max(time.Until(lw.at), 0)+10*time.Millisecond)
		// Waiting for a lease is expected, not a failure: say so once
		// per lease expiry, not on every retry.
		if lw.cause == nil && !v.status.LeaseExpiresAt.Equal(lw.at) {
			w.logger.Info("release waits for a lost node's lease to run out", "volume", volID, "node", lw.node,
				"lease_runs_out", lw.at.Round(0).UTC())
		}
		v.status.LeaseExpiresAt = lw.at
	}
	// A new leader's storage hold-off (decision 46) ends at a known time
	// too: try again then.
	var ho *leaderlease.HoldoffError
	if errors.As(err, &ho) {
		delay = min(delay, max(time.Until(ho.Until), 0)+10*time.Millisecond)
	}
	v.status.NextTry = time.Now().Add(delay)
	if lw == nil || !onlyLeaseWaits(err) {
		w.logger.Warn("release failed; will retry", "volume", volID, "evals", w.pendingEvalIDs(volID),
			"attempt", v.status.Attempts, "retry_in", delay, "error", err)
	} else {
		w.logger.Debug("release waits for a lease; will retry", "volume", volID, "attempt", v.status.Attempts, "retry_in", delay)
	}
	v.timer = time.AfterFunc(delay, func() {
		w.mu.Lock()
		if cur := w.vols[volID]; cur == v {
			v.timer = nil
		}
		w.mu.Unlock()
		w.enqueue(volID, false)
	})
}

// onlyLeaseWaits reports whether every error joined in err is a release
// waiting for a lease: only then is the retry not worth a warning.
func onlyLeaseWaits(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyLeaseWaits(e) {
				return false
			}
		}
		return true
	}
	var lw *leaseWait
	return errors.As(err, &lw) && lw.cause == nil
}

// backoff is called with w.mu held (SetBackoff changes the bounds).
func (w *Watcher) backoff(attempt int) time.Duration {
	d := w.cfg.BackoffBase
	for i := 1; i < attempt && d < w.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, w.cfg.BackoffMax)
	// Full jitter over the upper half keeps retries spread but never
	// shorter than half the step.
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// completeEvals ends every pending eval of a volume.
func (w *Watcher) completeEvals(volID string, status structs.EvalStatus, desc string) error {
	evals, err := w.state.State().EvalsByVolume(nil, volID)
	if err != nil {
		return err
	}
	for _, e := range evals {
		if e.Status != structs.EvalStatusPending {
			continue
		}
		req := &structs.EvalCompleteRequest{EvalID: e.ID, VolumeID: volID, Status: status, StatusDescription: desc}
		if _, _, err := w.apply.Apply(structs.EvalCompleteRequestType, req); err != nil {
			return err
		}
		if status == structs.EvalStatusFailed {
			// Complete ones are mostly completed by the state machine with
			// the last free; a failed one is what an operator must see.
			metrics.IncrCounter([]string{"release", "evals_failed"}, 1)
		}
	}
	return nil
}

// pendingEvalIDs names a volume's pending evals for log lines, so that an
// operator can grep one release by volume or by eval across servers.
func (w *Watcher) pendingEvalIDs(volID string) []string {
	evals, err := w.state.State().EvalsByVolume(nil, volID)
	if err != nil {
		return nil
	}
	var ids []string
	for _, e := range evals {
		if e.Status == structs.EvalStatusPending {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// watchEvals enqueues the volume of every pending eval now and of every
// eval that becomes pending later. After the first look it reads only the
// evals written since the last one: re-reading every pending eval on every
// change cost the leader O(backlog) per release under load. A restored
// state store (AbandonCh) starts it over from the beginning.
func (w *Watcher) watchEvals(ctx context.Context) {
	var (
		state *fsm.StateStore
		since uint64
	)
	for {
		if cur := w.state.State(); cur != state {
			state, since = cur, 0
		}
		ws := memdb.NewWatchSet()
		ws.Add(state.AbandonCh())
		evals, last, err := state.PendingEvalsSince(ws, since)
		if err != nil {
			w.logger.Error("reading pending evals", "error", err)
		}
		since = last
		// A volume has at most one pending eval, and enqueue ignores a
		// volume already queued.
		for _, e := range evals {
			w.enqueue(e.VolumeID, false)
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return
		}
	}
}
