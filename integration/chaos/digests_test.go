package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// digestCluster is a Cluster whose only working methods are Servers and
// Digest: each server answers from its own list of digests, one per call,
// the last one repeated.
type digestCluster struct {
	Cluster
	mu      sync.Mutex
	answers map[string][]structs.StateDigest
	calls   map[string]int
}

func (d *digestCluster) Servers() []string { return []string{"s1", "s2", "s3"} }

func (d *digestCluster) Digest(_ context.Context, s string) (*structs.StateDigest, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	list := d.answers[s]
	if len(list) == 0 {
		return nil, fmt.Errorf("%s is down", s)
	}
	i := min(d.calls[s], len(list)-1)
	d.calls[s]++
	out := list[i]
	return &out, nil
}

// dg is a digest of the state after the write at index of one log
// (history names which: "" for the one every server applies). Its
// AppliedIndex is the index of the state it hashed, as
// fsm.StateStore.Digest reports it.
func dg(index uint64, history string) structs.StateDigest {
	return structs.StateDigest{AppliedIndex: index, SHA256: fmt.Sprintf("%s%064d", history, index)[:64]}
}

func newDigestCluster(answers map[string][]structs.StateDigest) *digestCluster {
	return &digestCluster{answers: answers, calls: map[string]int{}}
}

func TestCompareDigests_UnderLoadComparesAtOneStateIndex(t *testing.T) {
	// The servers move on between digests; 12 is the one state index
	// all three are seen at.
	c := newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(10, ""), dg(12, ""), dg(14, "")},
		"s2": {dg(9, ""), dg(11, ""), dg(12, "")},
		"s3": {dg(8, ""), dg(10, ""), dg(12, "")},
	})
	r := compareDigests(c, 5*time.Second, false)
	if r.Violation != "" || r.Inconclusive != "" || (r.Index != 12 && r.Links == "") {
		t.Fatalf("exp: equal at 12, or linked by pairs got: %+v", r)
	}
}

func TestCompareDigests_ServersLinkedByPairs(t *testing.T) {
	// No index on all three: s1 and s2 agree at 5, s1 and s3 at 7.
	c := newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(5, ""), dg(7, "")},
		"s2": {dg(5, "")},
		"s3": {dg(7, "")},
	})
	r := compareDigests(c, 5*time.Second, false)
	if r.Violation != "" || r.Inconclusive != "" || r.Index != 0 || r.Links != "s1=s3 at 7, s1=s2 at 5" {
		t.Fatalf("exp: linked s1=s3 at 7, s1=s2 at 5 got: %+v", r)
	}
	// A server linked with none stays inconclusive.
	c = newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(5, "")},
		"s2": {dg(5, "")},
		"s3": {dg(7, "")},
	})
	if r := compareDigests(c, 300*time.Millisecond, false); r.Violation != "" || r.Inconclusive == "" {
		t.Fatalf("s3 unlinked exp: inconclusive got: %+v", r)
	}
}

func TestCompareDigests_DivergenceNamesTheIndexAndEveryDigest(t *testing.T) {
	c := newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(30, "")},
		"s2": {dg(30, "f")},
		"s3": {dg(28, "")},
	})
	r := compareDigests(c, 5*time.Second, false)
	if r.Violation == "" {
		t.Fatalf("exp: a violation got: %+v", r)
	}
	// s3 is named whether or not it was sampled before s1 and s2 were
	// found to differ (each server is sampled on its own).
	for _, want := range []string{"state index 30", "s1: sha256=" + dg(30, "").SHA256, "s2: sha256=" + dg(30, "f").SHA256, "s3: "} {
		if !strings.Contains(r.Violation, want) {
			t.Errorf("violation exp: %q in it got: %s", want, r.Violation)
		}
	}
}

func TestCompareDigests_ServerWhoseStateChangesWithoutAWrite(t *testing.T) {
	c := newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(40, ""), dg(40, "x")},
		"s2": {dg(38, "")},
		"s3": {dg(39, "")},
	})
	r := compareDigests(c, 5*time.Second, false)
	if !strings.Contains(r.Violation, "s1's state changed while its state index stayed 40") {
		t.Fatalf("exp: s1's change named got: %+v", r)
	}
}

func TestCompareDigests_NoCommonIndexIsInconclusive(t *testing.T) {
	c := newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(50, "")},
		"s2": {dg(49, "")},
	})
	r := compareDigests(c, 300*time.Millisecond, false)
	if r.Violation != "" || r.Inconclusive == "" || !strings.Contains(r.Inconclusive, "s3: no digest: s3 is down") {
		t.Fatalf("exp: inconclusive, s3 down named got: %+v", r)
	}
}

func TestCompareDigests_IdleWaitsForEveryServerToCatchUp(t *testing.T) {
	// At the end every server must report one state index in one round:
	// s3 still applying (58, then 59) is not caught up in round 1.
	c := newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(59, "")},
		"s2": {dg(59, "")},
		"s3": {dg(58, ""), dg(59, "")},
	})
	r := compareDigests(c, 5*time.Second, true)
	if r.Violation != "" || r.Index != 59 || r.Rounds != 2 {
		t.Fatalf("exp: caught up at 59 in round 2 got: %+v", r)
	}
	// A server that stays behind leaves it inconclusive, not a violation.
	c = newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(60, "")},
		"s2": {dg(61, "")},
		"s3": {dg(60, "")},
	})
	if r := compareDigests(c, 300*time.Millisecond, true); r.Violation != "" || r.Inconclusive == "" {
		t.Fatalf("state indexes apart exp: inconclusive got: %+v", r)
	}
	// Idle, a mismatch at one index is a violation too.
	c = newDigestCluster(map[string][]structs.StateDigest{
		"s1": {dg(62, "")},
		"s2": {dg(62, "f")},
		"s3": {dg(62, "")},
	})
	if r := compareDigests(c, 5*time.Second, true); !strings.Contains(r.Violation, "state digests differ at state index 62") {
		t.Fatalf("idle divergence exp: a violation at 62 got: %+v", r)
	}
}
