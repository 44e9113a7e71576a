package bench

import (
	"testing"
	"time"
)

// TestOverlappingHolds_FlagsOnlyOverlaps checks the callers' own safety
// check: two acknowledged holds of one volume overlap only when the second
// was acknowledged before the first's release was sent.
func TestOverlappingHolds_FlagsOnlyOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		holds []hold
		exp   int
	}{
		{"none", nil, 0},
		{"one after another", []hold{{"a", at(0), at(10)}, {"b", at(10), at(20)}, {"c", at(25), at(30)}}, 0},
		{"out of order, disjoint", []hold{{"c", at(25), at(30)}, {"a", at(0), at(10)}}, 0},
		{"second inside the first", []hold{{"a", at(0), at(30)}, {"b", at(10), at(20)}}, 1},
		{"third overlaps the first, not the second", []hold{{"a", at(0), at(50)}, {"b", at(10), at(20)}, {"c", at(40), at(60)}}, 2},
	} {
		if got := overlappingHolds("v", tc.holds); len(got) != tc.exp {
			t.Errorf("%s: exp: %d violations got: %d %v", tc.name, tc.exp, len(got), got)
		}
	}
}

// TestSummarize_NearestRank checks the percentiles of a known sample.
func TestSummarize_NearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	if l.Count != 100 || l.P50 != 50 || l.P90 != 90 || l.P99 != 99 || l.Max != 100 || l.Mean != 50.5 {
		t.Errorf("exp: 100 samples, p50 50, p90 90, p99 99, max 100, mean 50.5 got: %+v", l)
	}
	if l := summarize(nil); l.Count != 0 {
		t.Errorf("exp: an empty summary got: %+v", l)
	}
}
