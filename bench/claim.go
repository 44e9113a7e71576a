package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

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
				err = r.release(context.WithoutCancel(ctx), cl, p.vols[k], p.allocs[k], resp)
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

// release ends the simulated node's claim of volID for allocID. With the
// claim's answer in hand (and unless ServersDetach) it says, as an agent's
// terminal report does, that the node has node-detached that claim itself
// (true: the simulated node mounts nothing), naming the claim by the index
// it was taken at; the servers then free it in the release entry instead of
// driving a node detach (decision 61).
func (r *runner) release(ctx context.Context, cl *api.Client, volID, allocID string, claimed *structs.VolumeClaimResponse) error {
	if r.cfg.ServersDetach || claimed == nil || claimed.Claim == nil {
		_, err := cl.Release(ctx, volID, allocID)
		return err
	}
	_, err := cl.Claim(ctx, &structs.VolumeClaimRequest{
		VolumeID: volID, AllocID: allocID, Release: true,
		NodeDetached: true, ClaimIndex: claimed.Claim.CreateIndex})
	return err
}
