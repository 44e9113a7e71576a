package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/claimd/claimd/structs"
)

// S2 (every server holds the same state) is checked after every fault,
// under the running workload, and once more at the end when it is idle.
//
// A digest is comparable with another only at the same state. Its
// AppliedIndex is the index of the last write in the very view it hashed
// (fsm.StateStore.Digest), not Raft's applied index, which Raft advances
// when it hands entries to the state machine, before they are applied.
// Two servers whose digests name one index applied the same log up to it
// and nothing that wrote after it, so their hashes must be equal, with or
// without load. Below, "state index" is that AppliedIndex. The sampler
// reads every server's digest over and over and compares every pair of
// samples that share a state index; a mismatch is a violation. It is done
// when one state index was seen on every server (or, under load, when
// servers seen at shared indexes link all of them: linked).

// digestSample is one server's digest.
type digestSample struct {
	server string
	d      structs.StateDigest
	at     time.Time
}

func (s digestSample) String() string {
	return fmt.Sprintf("%s state@%d sha256=%.16s", s.server, s.d.AppliedIndex, s.d.SHA256)
}

// digestCompare is what one comparison found.
type digestCompare struct {
	// Index is the state index every server was compared at (0: none).
	Index uint64
	// Links, when no index was seen on every server, names the pairs of
	// servers compared at one index that together link them all
	// (digestSampler.linked); under load only.
	Links string
	// Rounds of sampling it took (idle), or digests taken (under load).
	Rounds int
	// Violation, when not empty, describes servers whose states differ
	// at one index.
	Violation string
	// Inconclusive says why no index common to every server was found
	// within the bound (no violation either).
	Inconclusive string
}

// digestSampler keeps every server's samples by state index.
type digestSampler struct {
	servers []string
	// byIndex: server → state index → the first sample at that index.
	byIndex map[string]map[uint64]digestSample
	latest  map[string]digestSample
	errs    map[string]error
	// idle: every server answered the last round with one state index,
	// idleIndex.
	idle      bool
	idleIndex uint64
	// changed describes a server whose hash changed while its state
	// index did not.
	changed string
	samples int
}

func newDigestSampler(servers []string) *digestSampler {
	ds := &digestSampler{servers: servers, byIndex: map[string]map[uint64]digestSample{},
		latest: map[string]digestSample{}, errs: map[string]error{}}
	for _, s := range servers {
		ds.byIndex[s] = map[uint64]digestSample{}
	}
	return ds
}

// record takes one server's answer.
func (ds *digestSampler) record(s string, d *structs.StateDigest, err error) (digestSample, bool) {
	ds.samples++
	switch {
	case err != nil:
		ds.errs[s] = err
		return digestSample{}, false
	case d == nil || d.SHA256 == "":
		ds.errs[s] = fmt.Errorf("its answer has no digest")
		return digestSample{}, false
	}
	delete(ds.errs, s)
	smp := digestSample{server: s, d: *d, at: time.Now()}
	ds.latest[s] = smp
	if prev, ok := ds.byIndex[s][d.AppliedIndex]; !ok {
		ds.byIndex[s][d.AppliedIndex] = smp
	} else if prev.d.SHA256 != smp.d.SHA256 && ds.changed == "" {
		ds.changed = fmt.Sprintf("%s's state changed while its state index stayed %d: sha256=%s then sha256=%s",
			s, d.AppliedIndex, prev.d.SHA256, smp.d.SHA256)
	}
	return smp, true
}

// round reads every server's digest at once (each bounded by per) and
// records what came back; idle is set when every server answered with
// one state index (idleIndex).
func (ds *digestSampler) round(c Cluster, per time.Duration) {
	type reply struct {
		s   string
		d   *structs.StateDigest
		err error
	}
	out := make(chan reply, len(ds.servers))
	var wg sync.WaitGroup
	for _, s := range ds.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), per)
			defer cancel()
			d, err := c.Digest(ctx, s)
			out <- reply{s, d, err}
		}()
	}
	wg.Wait()
	close(out)
	states := map[uint64]bool{}
	n := 0
	for r := range out {
		if smp, ok := ds.record(r.s, r.d, r.err); ok {
			states[smp.d.AppliedIndex] = true
			n++
		}
	}
	ds.idle, ds.idleIndex = false, 0
	if n == len(ds.servers) && len(states) == 1 {
		for i := range states {
			ds.idle, ds.idleIndex = true, i
		}
	}
}

// violation compares every pair of samples at one state index; it
// describes the first mismatch.
func (ds *digestSampler) violation() string {
	if ds.changed != "" {
		return ds.changed
	}
	var idx []uint64
	seen := map[uint64]bool{}
	for _, m := range ds.byIndex {
		for i := range m {
			if !seen[i] {
				seen[i] = true
				idx = append(idx, i)
			}
		}
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		var at []digestSample
		for _, s := range ds.servers {
			if smp, ok := ds.byIndex[s][i]; ok {
				at = append(at, smp)
			}
		}
		for _, smp := range at[1:] {
			if smp.d.SHA256 != at[0].d.SHA256 {
				return fmt.Sprintf("state digests differ at state index %d: %s", i, ds.describe(i))
			}
		}
	}
	return ""
}

// linked reports whether every server was compared, directly or through
// others, with every other one: servers seen at one state index are
// linked (their digests there are equal, else violation says so). It
// names, for each link made, the servers and the index. A server whose
// state left the others' history would differ from any of them at any
// later index, so the links stand for the comparison of all at once,
// which under load is rarer: the state index moves faster than a slow
// backend takes digests.
func (ds *digestSampler) linked() (bool, string) {
	set := map[string]string{}
	var find func(s string) string
	find = func(s string) string {
		if p, ok := set[s]; ok && p != s {
			return find(p)
		}
		return s
	}
	var idx []uint64
	seen := map[uint64]bool{}
	for _, m := range ds.byIndex {
		for i := range m {
			if !seen[i] {
				seen[i] = true
				idx = append(idx, i)
			}
		}
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] > idx[b] })
	var links []string
	for _, i := range idx {
		var at []string
		for _, s := range ds.servers {
			if _, ok := ds.byIndex[s][i]; ok {
				at = append(at, s)
			}
		}
		for _, s := range at[1:] {
			if a, b := find(at[0]), find(s); a != b {
				set[b] = a
				links = append(links, fmt.Sprintf("%s=%s at %d", at[0], s, i))
			}
		}
	}
	root := find(ds.servers[0])
	for _, s := range ds.servers[1:] {
		if find(s) != root {
			return false, ""
		}
	}
	return true, strings.Join(links, ", ")
}

// common returns the highest state index every server was seen at.
func (ds *digestSampler) common() uint64 {
	var best uint64
	for i := range ds.byIndex[ds.servers[0]] {
		all := true
		for _, s := range ds.servers[1:] {
			if _, ok := ds.byIndex[s][i]; !ok {
				all = false
				break
			}
		}
		if all && i > best {
			best = i
		}
	}
	return best
}

// describe lists each server's digest at index i, or its latest one when
// it was not seen there, and why a server gave none.
func (ds *digestSampler) describe(i uint64) string {
	var parts []string
	for _, s := range ds.servers {
		switch smp, ok := ds.byIndex[s][i]; {
		case ok:
			parts = append(parts, fmt.Sprintf("%s: sha256=%s (bytes %d)", s, smp.d.SHA256, smp.d.Bytes))
		case ds.latest[s].server != "" && i != 0:
			parts = append(parts, fmt.Sprintf("%s: not seen at %d, latest %s", s, i, ds.latest[s]))
		case ds.latest[s].server != "":
			parts = append(parts, ds.latest[s].String())
		case ds.errs[s] != nil:
			parts = append(parts, fmt.Sprintf("%s: no digest: %v", s, ds.errs[s]))
		default:
			parts = append(parts, fmt.Sprintf("%s: no digest", s))
		}
	}
	return strings.Join(parts, "; ")
}

// digestRoundPause is the least time between two digests of one server.
const digestRoundPause = 10 * time.Millisecond

// compareDigests samples every server's digest until one state index was
// seen on every server (all equal there), a mismatch shows, or the bound
// runs out. Under load, servers linked by equal digests at shared indexes
// (linked) also end it.
//
// Under load each server is sampled on its own, as fast as it answers
// (pausing as long as its last digest took), so that a slow or lagging
// server does not hold back the others: the more
// indexes the others were seen at, the likelier the lagging one is seen at
// one of them. Idle (untilIdle, at the end of a run) it samples every
// server at once, in rounds, and also requires one round where every
// server reports the same state index, that is, every server caught up
// with the others. Both are bounded in count too.
func compareDigests(c Cluster, bound time.Duration, untilIdle bool) digestCompare {
	ds := newDigestSampler(c.Servers())
	deadline := time.Now().Add(bound)
	per := func() time.Duration { return min(10*time.Second, max(time.Until(deadline), time.Second)) }
	var res digestCompare
	if untilIdle {
		for res.Rounds = 1; res.Rounds <= 10000; res.Rounds++ {
			ds.round(c, per())
			if v := ds.violation(); v != "" {
				res.Violation = v
				return res
			}
			if ds.idle {
				res.Index = ds.idleIndex
				return res
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(digestRoundPause)
		}
		res.Inconclusive = fmt.Sprintf("no round in which every server reported the same state index within %s (%d rounds); latest: %s",
			bound, res.Rounds, ds.describe(0))
		return res
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	// finish ends every server's loop, and a digest still under way.
	all, finish := context.WithCancel(context.Background())
	defer finish()
	for _, s := range ds.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 2000 && time.Now().Before(deadline) && all.Err() == nil; n++ {
				began := time.Now()
				ctx, cancel := context.WithTimeout(all, per())
				d, err := c.Digest(ctx, s)
				cancel()
				took := time.Since(began)
				if all.Err() != nil {
					return
				}
				mu.Lock()
				ds.record(s, d, err)
				if v := ds.violation(); v != "" && res.Violation == "" {
					res.Violation = v
				}
				if i := ds.common(); i != 0 && res.Index == 0 {
					res.Index = i
				} else if ok, links := ds.linked(); ok && res.Links == "" {
					res.Links = links
				}
				finished := res.Violation != "" || res.Index != 0 || res.Links != ""
				mu.Unlock()
				if finished {
					finish()
					return
				}
				// At most half of the time hashing: the servers are
				// busy with the workload and, some, with catching up.
				select {
				case <-all.Done():
					return
				case <-time.After(max(digestRoundPause, took)):
				}
			}
		}()
	}
	wg.Wait()
	res.Rounds = ds.samples
	if res.Violation != "" {
		res.Index, res.Links = 0, ""
	} else if res.Index == 0 && res.Links == "" {
		res.Inconclusive = fmt.Sprintf("no state index seen on every server within %s (%d digests); latest: %s; seen: %s",
			bound, ds.samples, ds.describe(0), ds.seen())
	}
	return res
}

// seen lists, for each server, the state indexes it was seen at and how
// long ago its latest digest was taken.
func (ds *digestSampler) seen() string {
	var parts []string
	for _, s := range ds.servers {
		var idx []uint64
		for i := range ds.byIndex[s] {
			idx = append(idx, i)
		}
		sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
		if len(idx) > 12 {
			idx = append(idx[:6], idx[len(idx)-6:]...)
		}
		age := "never"
		if l := ds.latest[s]; l.server != "" {
			age = time.Since(l.at).Round(time.Millisecond).String() + " ago"
		}
		parts = append(parts, fmt.Sprintf("%s %d indexes %v (latest %s)", s, len(ds.byIndex[s]), idx, age))
	}
	return strings.Join(parts, "; ")
}
