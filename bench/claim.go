package bench

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/structs"
)

// holderDetaches (PROTOTYPE, branch i41n): the simulated node's releases
// say it has node-detached the claim itself, which is true (it mounts
// nothing). Set CLAIMD_BENCH_HOLDER_DETACHES=1; an older server ignores it.
var holderDetaches = os.Getenv("CLAIMD_BENCH_HOLDER_DETACHES") == "1"

// claimRuns measures claim+release of distinct volumes. One pool of
// (alloc, volume) pairs serves every run: runs take pairs in order, each
// once, wrapping around the pool only after a drain showed every earlier
// release freed (an alloc whose claim was freed may claim the same volume
// anew; one whose claim is still being released may not). A run that
// would use a pair not known to be free stops early: PoolExhausted.
func (r *runner) claimRuns(ctx context.Context, emit func(*Result)) error {
	p := newPairs(r.cfg.Prefix, r.node.id, r.cfg.Volumes)
	err := r.c.createPairs(ctx, p)
	if p.created {
		r.vols = append(r.vols, p.vols...)
	}
	if err != nil {
		return err
	}
	var next, used int // the next pair; pairs used since the last full drain
	return r.forEachRun(ctx, emit, func(ctx context.Context, res *Result) error {
		n, err := r.claimRun(ctx, p, next, len(p.vols)-used, res)
		if err != nil {
			return err
		}
		next, used = (next+n)%len(p.vols), used+n
		drained, err := r.drainAfter(ctx, res)
		if drained {
			used = 0
		}
		return err
	})
}

// claimRun runs the callers on pairs first, first+1, … (modulo the pool),
// at most avail of them, and returns how many it used.
func (r *runner) claimRun(ctx context.Context, p *pairs, first, avail int, res *Result) (int, error) {
	// The callers claim for the simulated node, with its secret, as its
	// agent would: the servers check the node's identity on every call.
	clients, err := r.c.callerClients(ctx, res.Address, res.Callers, r.node.secret)
	if err != nil {
		return 0, err
	}
	defer closeAll(clients)

	start := time.Now()
	res.Started = start
	w := window{start: start.Add(r.cfg.Warmup)}
	w.end = w.start.Add(r.cfg.Duration)
	finishCPU := r.c.cpu.measure(w)
	var cursor atomic.Int64
	var exhausted atomic.Bool
	recs := make([]*recorder, len(clients))
	var wg sync.WaitGroup
	for i, cl := range clients {
		rec := newRecorder(w)
		recs[i] = rec
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(w.end) && ctx.Err() == nil {
				n := int(cursor.Add(1) - 1)
				if n >= avail {
					exhausted.Store(true)
					return
				}
				k := (first + n) % len(p.vols)
				t0 := time.Now()
				resp, err := cl.Claim(ctx, p.claim(k))
				rec.add(false, t0, err)
				if err != nil && refused(err) {
					continue
				}
				// Release even past the window's end or after an interrupt,
				// so that the pool is left with no live claim.
				t1 := time.Now()
				if holderDetaches && resp != nil && resp.Claim != nil {
					_, err = cl.Claim(context.WithoutCancel(ctx), &structs.VolumeClaimRequest{
						VolumeID: p.vols[k], AllocID: p.allocs[k], Release: true, NodeDetached: true,
						ClaimIndex: resp.Claim.CreateIndex})
				} else {
					_, err = cl.Release(context.WithoutCancel(ctx), p.vols[k], p.allocs[k])
				}
				rec.add(true, t1, err)
			}
		}()
	}
	wg.Wait()
	finishCPU(res)
	used := min(int(cursor.Load()), avail)
	if err := ctx.Err(); err != nil {
		return used, err
	}
	m := merge(recs)
	secs := r.cfg.Duration.Seconds()
	if exhausted.Load() {
		res.PoolExhausted = true
		secs = 0
		if m.last.After(w.start) {
			secs = m.last.Sub(w.start).Seconds()
		}
	}
	res.fill(m, secs)
	res.setCycles(res.Releases)
	return used, nil
}
