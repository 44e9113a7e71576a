package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// contendedRuns has every caller race for a few single-node-writer
// volumes. Each caller has its own alloc per volume; a winner holds the
// claim for cfg.Hold, releases it, and places a fresh alloc for its next
// try (its released claim must be freed before that alloc could claim
// again, and a new workload is a new alloc anyway). Losers are refused
// with max_claims — also while the last winner's release is still on its
// way to freed — and try the next volume at once.
//
// Safety (S1, S6) is checked two ways: a reader reads every volume over
// and over during the run and flags any read that shows two claims; and
// the callers' own acknowledged holds — from a claim's reply to the
// moment its release was sent, when the claim was certainly live — must
// never overlap on one volume.
func (r *runner) contendedRuns(ctx context.Context, emit func(*Result)) error {
	vols := make([]string, r.cfg.Volumes)
	for i := range vols {
		vols[i] = fmt.Sprintf("%s-cv%03d", r.cfg.Prefix, i)
	}
	fmt.Fprintf(r.cfg.Progress, "registering %d contended volumes\n", len(vols))
	if err := r.c.registerVolumes(ctx, vols); err != nil {
		return err
	}
	r.vols = append(r.vols, vols...)
	run := 0
	return r.forEachRun(ctx, emit, func(ctx context.Context, res *Result) error {
		run++
		return r.contendedRun(ctx, fmt.Sprintf("%s-r%d", r.cfg.Prefix, run), vols, res)
	})
}

// hold is one acknowledged, certainly-live claim.
type hold struct {
	alloc      string
	from, till time.Time // claim reply received, release sent
}

type contender struct {
	rec    *recorder
	cl     *api.Client
	gen    []int
	holds  [][]hold // per volume
	wins   int64
	placed error
}

func (r *runner) contendedRun(ctx context.Context, runID string, vols []string, res *Result) error {
	allocID := func(caller, vol, gen int) string {
		return fmt.Sprintf("%s-c%03d-v%03d-g%d", runID, caller, vol, gen)
	}
	allocFor := func(caller, vol, gen int) *structs.Alloc {
		return &structs.Alloc{ID: allocID(caller, vol, gen), NodeID: r.node.id,
			Volumes: []*structs.AllocVolumeRequest{{VolumeID: vols[vol]}}}
	}
	var first []*structs.Alloc
	for c := range res.Callers {
		for v := range vols {
			first = append(first, allocFor(c, v, 0))
		}
	}
	fmt.Fprintf(r.cfg.Progress, "  placing %d allocs (%d callers × %d volumes)\n", len(first), res.Callers, len(vols))
	if err := r.c.placeAllocs(ctx, first); err != nil {
		return err
	}
	// Callers claim with the simulated node's secret, as its agent would.
	clients, err := r.c.callerClients(ctx, res.Address, res.Callers, r.node.secret)
	if err != nil {
		return err
	}
	defer closeAll(clients)

	start := time.Now()
	res.Started = start
	w := window{start: start.Add(r.cfg.Warmup)}
	w.end = w.start.Add(r.cfg.Duration)
	finishCPU := r.c.cpu.measure(w)
	cs := make([]*contender, len(clients))
	var wg sync.WaitGroup
	for i, cl := range clients {
		c := &contender{rec: newRecorder(w), cl: cl, gen: make([]int, len(vols)), holds: make([][]hold, len(vols))}
		cs[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(w.end) && ctx.Err() == nil; k++ {
				v := (i + k) % len(vols)
				alloc := allocID(i, v, c.gen[v])
				req := &structs.VolumeClaimRequest{VolumeID: vols[v], AllocID: alloc, NodeID: r.node.id, Mode: structs.ClaimModeWrite}
				t0 := time.Now()
				resp, err := cl.Claim(ctx, req)
				in := c.rec.add(false, t0, err)
				if err != nil && refused(err) {
					continue
				}
				from := time.Now()
				if err == nil && in {
					c.wins++
				}
				if r.cfg.Hold > 0 {
					time.Sleep(r.cfg.Hold)
				}
				till := time.Now()
				rerr := r.release(context.WithoutCancel(ctx), cl, vols[v], alloc, resp)
				c.rec.add(true, till, rerr)
				if err == nil {
					c.holds[v] = append(c.holds[v], hold{alloc: alloc, from: from, till: till})
				}
				c.gen[v]++
				if perr := r.c.placeOn(ctx, cl, allocFor(i, v, c.gen[v])); perr != nil {
					c.placed = fmt.Errorf("place a fresh alloc: %w", perr)
					return
				}
			}
		}()
	}
	var checks atomic.Int64
	var violations []string
	readerDone := make(chan struct{})
	stopReader := make(chan struct{})
	go func() {
		defer close(readerDone)
		violations = r.watchClaims(ctx, vols, stopReader, &checks)
	}()
	wg.Wait()
	finishCPU(res)
	close(stopReader)
	<-readerDone
	if err := ctx.Err(); err != nil {
		return err
	}

	recs := make([]*recorder, len(cs))
	for i, c := range cs {
		recs[i] = c.rec
		res.Wins += c.wins
		if c.placed != nil {
			return c.placed
		}
	}
	m := merge(recs)
	res.fill(m, r.cfg.Duration.Seconds())
	res.Refusals = res.Errors[string(structs.CodeMaxClaims)]
	delete(res.Errors, string(structs.CodeMaxClaims))
	res.WinsPerSec = float64(res.Wins) / r.cfg.Duration.Seconds()
	res.setCycles(res.Wins)
	for v := range vols {
		var hs []hold
		for _, c := range cs {
			hs = append(hs, c.holds[v]...)
		}
		violations = append(violations, overlappingHolds(vols[v], hs)...)
	}

	res.Checks = checks.Load()
	res.Violations = violations
	drained, err := r.drainAfter(ctx, res)
	if err != nil || !drained {
		return err
	}
	// Every release is freed now: a claim left is one the tool lost track
	// of, which is an error of the tool or the servers.
	for _, id := range vols {
		vol, _, err := r.c.admin.Volume(ctx, id, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n := len(vol.AllClaims()); n > 0 {
			res.Violations = append(res.Violations, fmt.Sprintf("volume %s still has %d claims after every release was freed", id, n))
		}
	}
	return nil
}

// watchClaims reads every volume until stop is closed and reports each
// read that shows more than one claim (live or past) on a volume: a
// single-node-writer volume allows one alloc in total (S1).
func (r *runner) watchClaims(ctx context.Context, vols []string, stop <-chan struct{}, checks *atomic.Int64) []string {
	var out []string
	for {
		for _, id := range vols {
			select {
			case <-stop:
				return out
			default:
			}
			vol, meta, err := r.c.admin.Volume(ctx, id, structs.QueryOptions{})
			if err != nil {
				if ctx.Err() != nil {
					return out
				}
				r.cfg.Logger.Warn("safety read failed", "volume", id, "error", err)
				continue
			}
			checks.Add(1)
			if cs := vol.AllClaims(); len(cs) > 1 && len(out) < 20 {
				var allocs []string
				for _, c := range cs {
					allocs = append(allocs, fmt.Sprintf("%s(%s)", c.AllocID, c.State))
				}
				out = append(out, fmt.Sprintf("volume %s at index %d has %d claims: %v", id, meta.Index, len(cs), allocs))
			}
		}
		select {
		case <-stop:
			return out
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// overlappingHolds returns a violation for every pair of holds on one
// volume whose certainly-live intervals overlap.
func overlappingHolds(vol string, hs []hold) []string {
	sort.Slice(hs, func(i, j int) bool { return hs[i].from.Before(hs[j].from) })
	var out []string
	var last hold
	for i, h := range hs {
		if i > 0 && h.from.Before(last.till) {
			out = append(out, fmt.Sprintf("volume %s: %s was acknowledged while %s still held it", vol, h.alloc, last.alloc))
		}
		if i == 0 || h.till.After(last.till) {
			last = h
		}
	}
	return out
}
