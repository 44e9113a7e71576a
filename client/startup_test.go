package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
)

// The start-up decision: only a lease file of this boot and this node,
// renewed, with its fence start still ahead, lets a restarted agent keep
// its fence-policy volumes; anything else fences them before it
// registers.
func TestJudgeStartupLease(t *testing.T) {
	now := int64(500 * time.Second)
	live := &leasefile.File{NodeID: "n1", BootID: "b1", FenceAt: now + int64(2*time.Second), Deadline: now + int64(3*time.Second)}
	with := func(edit func(*leasefile.File)) *leasefile.File {
		f := *live
		edit(&f)
		return &f
	}
	cases := []struct {
		name string
		f    *leasefile.File
		live bool
		why  string
	}{
		{"live", live, true, ""},
		{"missing", nil, false, "no lease file"},
		{"another boot", with(func(f *leasefile.File) { f.BootID = "b0" }), false, "another boot"},
		{"no boot id", with(func(f *leasefile.File) { f.BootID = "" }), false, "another boot"},
		{"another node", with(func(f *leasefile.File) { f.NodeID = "n2" }), false, "not this node's"},
		{"never renewed", with(func(f *leasefile.File) { f.FenceAt, f.Deadline = 0, 0 }), false, "never renewed"},
		{"fence start passed, deadline ahead", with(func(f *leasefile.File) { f.FenceAt = now - 1 }), false, "passed"},
		{"deadline passed", with(func(f *leasefile.File) { f.FenceAt, f.Deadline = now-int64(time.Second), now-1 }), false, "passed"},
	}
	for _, c := range cases {
		got := judgeStartupLease(c.f, errors.New("open: no such file"), "n1", "b1", now)
		if got.live != c.live || !strings.Contains(got.why, c.why) {
			t.Errorf("%s exp: live=%v why~%q got: %+v", c.name, c.live, c.why, got)
		}
	}
	if got := judgeStartupLease(live, nil, "n1", "b1", now); got.remaining != 3*time.Second {
		t.Fatalf("live lease exp: 3s to the deadline got: %s", got.remaining)
	}
}

// A shown-live lease becomes this run's lease on its own clock: the fence
// starts when the predecessor's would have. Without it the lease counts
// as run out, and fence-policy mounts are refused until a renewal.
func TestNodeLease_AdoptFromTheLeaseFile(t *testing.T) {
	l := newNodeLease(8*time.Second, newLeaseClock(1))
	if l.remaining() > 0 {
		t.Fatalf("new lease exp: run out got: %s left", l.remaining())
	}
	l.adopt(3 * time.Second)
	if r := l.remaining(); r <= 2900*time.Millisecond || r > 3*time.Second {
		t.Fatalf("adopted lease exp: about 3s left got: %s", r)
	}
	slow := newNodeLease(8*time.Second, newLeaseClock(0.5))
	slow.adopt(4 * time.Second)
	if r := slow.remaining(); r <= 1900*time.Millisecond || r > 2*time.Second {
		t.Fatalf("adopted lease on a half-rate clock exp: 2s of its clock got: %s", r)
	}
	l.adopt(-time.Second)
	if r := l.remaining(); r < 2*time.Second {
		t.Fatalf("adopting a run-out lease exp: no change got: %s", r)
	}
}

// -fence-timeout: default half the budget; above 0 and below the budget,
// with an error naming the field and the budget.
func TestConfig_FenceTimeout(t *testing.T) {
	if got := DefaultFenceTimeout(8 * time.Second); got != time.Second {
		t.Fatalf("default for an 8s lease exp: 1s got: %s", got)
	}
	if got := DefaultFenceTimeout(0); got != 5*time.Second {
		t.Fatalf("default without a lease exp: 5s got: %s", got)
	}
	for _, c := range []struct {
		timeout, lease time.Duration
		err            string
	}{
		{0, 8 * time.Second, ""},
		{1500 * time.Millisecond, 8 * time.Second, ""},
		{2 * time.Second, 8 * time.Second, "fence_timeout: 2s is not below the fence budget 2s"},
		{-time.Second, 8 * time.Second, "fence_timeout: -1s is negative"},
		{9 * time.Second, 0, ""},
		{time.Minute, time.Hour, "not below the fence budget 10s"},
	} {
		cfg := Config{Servers: []string{"127.0.0.1:1"}, DataDir: t.TempDir(), NodeLease: c.lease, FenceTimeout: c.timeout}
		err := cfg.validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("timeout %s lease %s exp: %q got: %v", c.timeout, c.lease, c.err, err)
		}
	}
}

// What counts as the servers holding a claim for this node.
func TestClaimHeldFor(t *testing.T) {
	vol := func(c *structs.Claim, past bool) *structs.Volume {
		v := &structs.Volume{ID: "v", WriteClaims: map[string]*structs.Claim{}, PastClaims: map[string]*structs.Claim{}}
		if c != nil {
			if past {
				v.PastClaims[c.AllocID] = c
			} else {
				v.WriteClaims[c.AllocID] = c
			}
		}
		return v
	}
	cases := []struct {
		name string
		v    *structs.Volume
		held bool
		why  string
	}{
		{"live", vol(&structs.Claim{AllocID: "a", NodeID: "n1", State: structs.ClaimStateTaken}, false), true, ""},
		{"unpublishing: the servers will ask for the unmount", vol(&structs.Claim{AllocID: "a", NodeID: "n1", State: structs.ClaimStateUnpublishing}, true), true, ""},
		{"gone", vol(nil, false), false, "no longer list"},
		{"other node", vol(&structs.Claim{AllocID: "a", NodeID: "n2", State: structs.ClaimStateTaken}, false), false, "on node n2"},
		{"force detached", vol(&structs.Claim{AllocID: "a", NodeID: "n1", State: structs.ClaimStateNodeDetached, ForcedSkip: true}, true), false, "force detach"},
		{"fenced", vol(&structs.Claim{AllocID: "a", NodeID: "n1", State: structs.ClaimStateControllerDetached, Fenced: true}, true), false, "fenced"},
		{"freed after a force detach", &structs.Volume{Released: []*structs.Claim{{AllocID: "a", NodeID: "n1", State: structs.ClaimStateFreed, ForcedSkip: true}}},
			false, "force detach"},
	}
	for _, c := range cases {
		held, why, err := claimHeldFor(c.v, "a", "n1")
		if err != nil || held != c.held || !strings.Contains(why, c.why) {
			t.Errorf("%s exp: held=%v why~%q got: %v %q %v", c.name, c.held, c.why, held, why, err)
		}
	}
}
