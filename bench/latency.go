package bench

import (
	"errors"
	"slices"
	"time"

	"github.com/claimd/claimd/structs"
)

// Latency summarises call round trips, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// summarize sorts ds in place and returns its percentiles (nearest rank).
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	rank := func(q float64) float64 {
		i := int(q*float64(len(ds))+0.999999) - 1
		return ms(ds[min(max(i, 0), len(ds)-1)])
	}
	return Latency{
		Count: len(ds), Mean: ms(sum / time.Duration(len(ds))),
		P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: ms(ds[len(ds)-1]),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// window is the measured part of a run: calls that complete in
// [start, end) count.
type window struct{ start, end time.Time }

func (w window) contains(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// recorder is one caller's measurements; callers never share one, so it
// needs no lock. merge combines them after the callers stopped.
type recorder struct {
	w        window
	claims   []time.Duration // claim calls that succeeded or were refused
	releases []time.Duration
	errs     map[string]int64
	// last is when this caller's last recorded call completed.
	last time.Time
}

func newRecorder(w window) *recorder {
	return &recorder{w: w, errs: map[string]int64{}}
}

// add records one call that started at t0 and returned err, and reports
// whether it completed inside the window. Every call that returned counts,
// refused or failed ones included (the caller waited that long); failures
// are also counted by error code.
func (r *recorder) add(release bool, t0 time.Time, err error) bool {
	done := time.Now()
	if !r.w.contains(done) {
		return false
	}
	r.last = done
	if err != nil {
		r.errs[errorCode(err)]++
	}
	if release {
		r.releases = append(r.releases, done.Sub(t0))
	} else {
		r.claims = append(r.claims, done.Sub(t0))
	}
	return true
}

// errorCode names an error by its stable claimd code, so that counts
// survive any number of forwarding hops ("other" if it has none).
func errorCode(err error) string {
	var ce *structs.CodedError
	if errors.As(err, &ce) {
		return string(ce.Code)
	}
	return "other"
}

// merged is every caller's recorder combined.
type merged struct {
	claims, releases []time.Duration
	errs             map[string]int64
	last             time.Time
}

func merge(rs []*recorder) merged {
	m := merged{errs: map[string]int64{}}
	for _, r := range rs {
		m.claims = append(m.claims, r.claims...)
		m.releases = append(m.releases, r.releases...)
		for k, v := range r.errs {
			m.errs[k] += v
		}
		if r.last.After(m.last) {
			m.last = r.last
		}
	}
	return m
}
