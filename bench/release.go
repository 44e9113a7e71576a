package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/structs"
)

// releaseRuns measures the release pipeline, once per target: N allocs
// (one volume each) claim their volumes, are stopped together, and the
// simulated node reports them complete at once, as an agent does once its
// tasks exit. The servers then release every claim (node detach on the
// simulated node → controller step, skipped: the plugin has no controller
// → freed, each a checkpoint). Each claim is timed from the stop until a
// blocking query on Volume.List shows it freed.
func (r *runner) releaseRuns(ctx context.Context, emit func(*Result)) error {
	callers := slices.Max(r.cfg.Callers)
	r.cfg.Callers = []int{callers}
	run := 0
	return r.forEachRun(ctx, emit, func(ctx context.Context, res *Result) error {
		run++
		return r.releaseRun(ctx, fmt.Sprintf("%s-r%d", r.cfg.Prefix, run), res)
	})
}

func (r *runner) releaseRun(ctx context.Context, runID string, res *Result) error {
	p := newPairs(runID, r.node.id, r.cfg.Volumes)
	err := r.c.createPairs(ctx, p)
	if p.created {
		r.vols = append(r.vols, p.vols...)
	}
	if err != nil {
		return err
	}
	// cl stops the allocs and watches the volumes with the run's token;
	// the callers claim with the simulated node's secret, as its agent
	// would.
	admin, err := r.c.callerClients(ctx, res.Address, 1, r.cfg.Token)
	if err != nil {
		return err
	}
	defer closeAll(admin)
	cl := admin[0]
	clients, err := r.c.callerClients(ctx, res.Address, res.Callers, r.node.secret)
	if err != nil {
		return err
	}
	defer closeAll(clients)

	// Claim every volume: the claims are measured like any claim run,
	// with no warmup and no time limit.
	fmt.Fprintf(r.cfg.Progress, "  claiming %d volumes with %d callers\n", len(p.vols), len(clients))
	start := time.Now()
	res.Started = start
	w := window{start: start, end: start.Add(24 * time.Hour)}
	var cursor atomic.Int64
	recs := make([]*recorder, len(clients))
	claimed := make([]bool, len(p.vols))
	var wg sync.WaitGroup
	for i, c := range clients {
		rec := newRecorder(w)
		recs[i] = rec
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := int(cursor.Add(1) - 1)
				if k >= len(p.vols) {
					return
				}
				t0 := time.Now()
				_, err := c.Claim(ctx, p.claim(k))
				rec.add(false, t0, err)
				claimed[k] = err == nil
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	m := merge(recs)
	res.fill(m, time.Since(start).Seconds())
	// fill computed the claim phase's rate; the run's rate is the release.
	res.OpsPerSec, res.ClaimsPerSec = 0, 0
	var ids []string
	want := map[string]bool{}
	for k, ok := range claimed {
		if ok {
			ids = append(ids, p.allocs[k])
			want[p.vols[k]] = true
		}
	}
	res.Allocs = len(ids)
	if len(ids) == 0 {
		return fmt.Errorf("no claim succeeded: %s", fmtErrors(res.Errors))
	}

	// Stop them all and time each claim until freed.
	fmt.Fprintf(r.cfg.Progress, "  stopping %d allocs\n", len(ids))
	stop := time.Now()
	for start := 0; start < len(ids); start += maxBatch {
		if _, err := cl.StopAllocs(ctx, ids[start:min(start+maxBatch, len(ids))]...); err != nil {
			return fmt.Errorf("stop allocs: %w", err)
		}
	}
	if err := r.node.reportTerminal(ctx, ids); err != nil {
		return err
	}
	freedAt := make(map[string]time.Duration, len(ids))
	wait := r.cfg.DrainTimeout
	if wait <= 0 {
		wait = defaultDrainTimeout
	}
	deadline := stop.Add(wait)
	var index uint64
	for len(freedAt) < len(ids) {
		if time.Now().After(deadline) {
			res.Errors["not_freed"] = int64(len(ids) - len(freedAt))
			break
		}
		vs, meta, err := cl.Volumes(ctx, PluginID, structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: 5 * time.Second})
		if err != nil {
			return fmt.Errorf("watch volumes: %w", err)
		}
		index = meta.Index
		now := time.Since(stop)
		for _, v := range vs {
			if !strings.HasPrefix(v.ID, runID) || !want[v.ID] {
				continue
			}
			if _, done := freedAt[v.ID]; !done && !v.HasClaims() {
				freedAt[v.ID] = now
			}
		}
	}
	lat := make([]time.Duration, 0, len(freedAt))
	var last time.Duration
	for _, d := range freedAt {
		lat = append(lat, d)
		last = max(last, d)
	}
	l := summarize(lat)
	res.StopToFreed = &l
	res.Freed = len(freedAt)
	res.Seconds = last.Seconds()
	if last > 0 {
		res.FreedPerSec = float64(res.Freed) / last.Seconds()
	}
	return nil
}
