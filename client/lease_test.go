package client

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// The lease runs from the send time for FenceDeadline of the shorter of
// the two lengths, a late answer to an early heartbeat never shortens it,
// and an answer without a lease (a server that could not confirm it
// leads) renews nothing.
func TestNodeLease_RenewFromSendTime(t *testing.T) {
	l := newNodeLease(10*time.Second, newLeaseClock(1))
	if l.remaining() > 0 {
		t.Fatalf("lease before any renewal exp: run out got: %s left", l.remaining())
	}
	l.renew(0, 0)
	if l.remaining() > 0 {
		t.Fatalf("answer without a lease exp: no renewal got: %s left", l.remaining())
	}
	sent := l.clock.now()
	l.renew(sent, 20*time.Second)
	want := sent + structs.FenceDeadline(10*time.Second)
	if l.validUntil != want {
		t.Fatalf("lease granted longer than asked exp: own length counts (%s) got: %s", want, l.validUntil)
	}
	l.renew(sent, 4*time.Second)
	if l.validUntil != want {
		t.Fatalf("a shorter grant for the same send exp: no shortening got: %s", l.validUntil)
	}
	// A later send granted a shorter lease ends before the one held
	// (sent+1s+3.8s < sent+9.5s): the longer one stands.
	l.renew(sent+time.Second, 4*time.Second)
	if l.validUntil != want {
		t.Fatalf("renewal ending earlier exp: kept %s got: %s", want, l.validUntil)
	}
	select {
	case <-l.renewed:
	default:
		t.Fatal("renewal exp: the fence loop woken got: no signal")
	}
}

// A disabled lease never renews and never asks for a fence.
func TestNodeLease_Disabled(t *testing.T) {
	l := newNodeLease(0, newLeaseClock(1))
	l.renew(0, time.Minute)
	if l.enabled() || l.validUntil != 0 {
		t.Fatalf("lease 0 exp: disabled got: %+v", l)
	}
	if got := l.heartbeatEvery(9 * time.Second); got != 3*time.Second {
		t.Fatalf("heartbeat without a lease exp: ttl/3 got: %s", got)
	}
}

// The clock rate scales readings, and realDuration inverts it: a slow
// clock (rate < 1) makes the agent fence later in real time, which the
// servers' drift allowance covers down to 1-LeaseClockDrift.
func TestLeaseClock_Rate(t *testing.T) {
	c := leaseClock{origin: time.Now().Add(-10 * time.Second), rate: 0.5}
	if now := c.now(); now < 5*time.Second || now > 6*time.Second {
		t.Fatalf("clock at rate 0.5 after 10 s exp: about 5 s got: %s", now)
	}
	if got := c.realDuration(time.Second); got != 2*time.Second {
		t.Fatalf("1 s of a half-rate clock exp: 2 s real got: %s", got)
	}
	// The slowest agent clock within the drift bound fences after
	// lease·0.95/(1-ρ) = lease of real time; the fastest leader clock acts
	// after (lease·1.05+2s)/(1+ρ) > lease of real time.
	for _, lease := range []time.Duration{structs.MinNodeLease, 4 * time.Second, 30 * time.Second, structs.MaxNodeLease} {
		agentReal := float64(structs.FenceDeadline(lease)) / (1 - structs.LeaseClockDrift)
		serverReal := float64(structs.LeaseExpiry(lease)) / (1 + structs.LeaseClockDrift)
		if agentReal >= serverReal {
			t.Fatalf("lease %s: slowest agent fences at %s real, fastest server acts at %s",
				lease, time.Duration(agentReal), time.Duration(serverReal))
		}
	}
}

// The fence budget is a quarter of the lease, at most 10 s, and a node
// heartbeats at least four times per lease.
func TestNodeLease_BudgetAndCadence(t *testing.T) {
	for _, tc := range []struct{ lease, budget, every time.Duration }{
		{4 * time.Second, time.Second, time.Second},
		{30 * time.Second, 7500 * time.Millisecond, 3 * time.Second},
		{time.Hour, 10 * time.Second, 3 * time.Second},
	} {
		l := newNodeLease(tc.lease, newLeaseClock(1))
		if got := l.fenceBudget(); got != tc.budget {
			t.Errorf("lease %s budget exp: %s got: %s", tc.lease, tc.budget, got)
		}
		if got := l.heartbeatEvery(9 * time.Second); got != tc.every {
			t.Errorf("lease %s heartbeat exp: %s got: %s", tc.lease, tc.every, got)
		}
	}
}

// The held-claims record survives a restart whole and lists only the
// fence-policy claims as fenceable.
func TestHeldClaims_Durable(t *testing.T) {
	dir := t.TempDir()
	h, err := loadHeldClaims(dir)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.add(&heldClaim{AllocID: "a1", VolumeID: "v1", PluginID: "p", ExternalID: "e1", NodeLost: structs.NodeLostFence, MountPath: "/m/1"}))
	must(h.add(&heldClaim{AllocID: "a1", VolumeID: "v2", PluginID: "p", ExternalID: "e2", NodeLost: structs.NodeLostWait}))
	must(h.add(&heldClaim{AllocID: "a2", VolumeID: "v3", PluginID: "p", ExternalID: "e3", NodeLost: structs.NodeLostFence, ReadOnly: true}))
	must(h.remove("a2", "v3"))

	again, err := loadHeldClaims(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := again.fenceable()
	if len(got) != 1 || got[0].VolumeID != "v1" || got[0].MountPath != "/m/1" || len(again.claims) != 2 {
		t.Fatalf("held claims after reload exp: v1 fenceable of 2 got: %+v (%d)", got, len(again.claims))
	}
	if fi, err := os.Stat(filepath.Join(dir, heldClaimsFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("held-claims file exp: mode 0600 got: %v %v", fi, err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(leftovers) != 0 {
		t.Fatalf("temp files exp: none left got: %v", leftovers)
	}
}

// The record keeps its own copy: a caller changing its claim after adding
// it (the mount path, once mounted) races no save.
func TestHeldClaims_AddCopies(t *testing.T) {
	h, err := loadHeldClaims(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &heldClaim{AllocID: "a1", VolumeID: "v1", NodeLost: structs.NodeLostFence}
	if err := h.add(c); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 50; i++ {
			_ = h.add(&heldClaim{AllocID: "a2", VolumeID: "v2"})
		}
	}()
	c.MountPath = "/changed"
	<-done
	if got := h.fenceable(); len(got) != 1 || got[0].MountPath != "" {
		t.Fatalf("held claim exp: the copy added got: %+v", got)
	}
}
