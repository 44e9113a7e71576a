package fencewatch

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/leasefile"
)

const boot = "b1"

var sec = int64(time.Second)

func file(fenceAt, deadline int64, claims ...leasefile.Claim) *leasefile.File {
	return &leasefile.File{NodeID: "n1", BootID: boot, FenceAt: fenceAt, Deadline: deadline, Claims: claims}
}

func TestCheckStart(t *testing.T) {
	now := 100 * sec
	mounted := leasefile.Claim{AllocID: "a", VolumeID: "v", MountPath: "/m", NodeLost: "fence"}
	cases := []struct {
		name   string
		f      *leasefile.File
		err    error
		alloc  string
		vol    string
		ready  bool
		wait   string // in Wait
		errHas string // in Err
	}{
		{"no file yet", nil, fs.ErrNotExist, "a", "", false, "no lease file yet", ""},
		{"unreadable", nil, errors.New("permission denied"), "a", "", false, "permission denied", ""},
		{"another boot", &leasefile.File{BootID: "b0", FenceAt: now + sec, Claims: []leasefile.Claim{mounted}}, nil, "a", "", false, "another boot", ""},
		{"not listed", file(now+sec, now+2*sec), nil, "a", "", false, "not mounted on this node yet", ""},
		{"mounting", file(now+sec, now+2*sec, leasefile.Claim{AllocID: "a", VolumeID: "v", NodeLost: "fence"}), nil, "a", "", false, "being mounted", ""},
		{"lease run out", file(now-1, now+sec, mounted), nil, "a", "", false, "not shown live", ""},
		{"never renewed", file(0, 0, mounted), nil, "a", "", false, "not shown live", ""},
		{"ready", file(now+sec, now+2*sec, mounted), nil, "a", "", true, "", ""},
		{"ready, volume named", file(now+sec, now+2*sec, mounted), nil, "a", "v", true, "", ""},
		{"other volume named", file(now+sec, now+2*sec, mounted), nil, "a", "w", false, "volume w is not mounted", ""},
		{"wait policy, lease run out", file(now-1, now, leasefile.Claim{AllocID: "a", VolumeID: "v", MountPath: "/m", NodeLost: "wait"}), nil, "a", "", true, "", ""},
		{"stopping", file(now+sec, now+2*sec, leasefile.Claim{AllocID: "a", VolumeID: "v", MountPath: "/m", NodeLost: "fence", Stopping: true}), nil, "a", "", false, "", "releasing the claim"},
		{"two volumes, none named", file(now+sec, now+2*sec, mounted, leasefile.Claim{AllocID: "a", VolumeID: "v2", MountPath: "/m2"}), nil, "a", "", false, "", "-volume: allocation a has 2 volumes on this node (v, v2)"},
	}
	for _, c := range cases {
		s := CheckStart(c.f, c.err, c.alloc, c.vol, now, boot)
		switch {
		case s.Ready != c.ready:
			t.Errorf("%s: ready exp: %v got: %+v", c.name, c.ready, s)
		case c.ready && (s.Claim.MountPath != "/m" || s.Claim.VolumeID != "v"):
			t.Errorf("%s: claim exp: a/v at /m got: %+v", c.name, s.Claim)
		case c.wait != "" && !strings.Contains(s.Wait, c.wait):
			t.Errorf("%s: wait exp: %q in got: %+v", c.name, c.wait, s)
		case c.errHas != "" && (s.Err == nil || !strings.Contains(s.Err.Error(), c.errHas)):
			t.Errorf("%s: error exp: %q in got: %+v", c.name, c.errHas, s)
		case c.errHas == "" && s.Err != nil:
			t.Errorf("%s: error exp: none got: %v", c.name, s.Err)
		}
	}
}

func TestCheckRunning(t *testing.T) {
	now := 100 * sec
	fc := leasefile.Claim{AllocID: "a", VolumeID: "v", MountPath: "/m", NodeLost: "fence"}
	wc := leasefile.Claim{AllocID: "w", VolumeID: "v2", MountPath: "/m2", NodeLost: "wait"}
	live := file(now+sec, now+2*sec, fc, wc)
	cases := []struct {
		name string
		f    *leasefile.File
		c    leasefile.Claim
		now  int64
		want leasefile.Verdict
	}{
		{"fence claim, live", live, fc, now, leasefile.Hold},
		{"fence claim at FenceAt", live, fc, now + sec, leasefile.Fence},
		{"fence claim, file unreadable", nil, fc, now, leasefile.Fence},
		{"wait claim, file unreadable", nil, wc, now, leasefile.Hold},
		{"wait claim, lease run out", live, wc, now + 5*sec, leasefile.Hold},
		{"claim gone", file(now+sec, now+2*sec, wc), fc, now, leasefile.Stop},
		{"claim stopping", file(now+sec, now+2*sec, leasefile.Claim{AllocID: "w", VolumeID: "v2", NodeLost: "wait", Stopping: true}), wc, now, leasefile.Stop},
	}
	for _, c := range cases {
		if got := Check(c.f, c.c, c.now, boot); got != c.want {
			t.Errorf("%s: exp: %s got: %s", c.name, c.want, got)
		}
	}
}

func TestKillGraceFitsTheDeadline(t *testing.T) {
	fc := leasefile.Claim{AllocID: "a", VolumeID: "v", NodeLost: "fence"}
	wc := leasefile.Claim{AllocID: "w", VolumeID: "v2", NodeLost: "wait"}
	ms := int64(time.Millisecond)
	// A 3 s lease: FenceAt 750 ms before the Deadline.
	f := file(10*sec, 10*sec+750*ms)
	cases := []struct {
		name string
		c    leasefile.Claim
		v    leasefile.Verdict
		flag time.Duration
		now  int64
		want time.Duration
	}{
		{"fence at FenceAt: half the window", fc, leasefile.Fence, 0, 10 * sec, 375 * time.Millisecond},
		{"fence noticed late: half what is left", fc, leasefile.Fence, 0, 10*sec + 550*ms, 100 * time.Millisecond},
		{"fence after the deadline: at once", fc, leasefile.Fence, 0, 11 * sec, 0},
		{"fence, a long flag: still half what is left", fc, leasefile.Fence, 30 * time.Second, 10 * sec, 375 * time.Millisecond},
		{"fence, a short flag", fc, leasefile.Fence, 100 * time.Millisecond, 10 * sec, 100 * time.Millisecond},
		{"stop of a fence claim, lease live", fc, leasefile.Stop, 0, 5 * sec, 375 * time.Millisecond},
		{"stop of a fence claim, a long flag: the operator's", fc, leasefile.Stop, 30 * time.Second, 5 * sec, 30 * time.Second},
		{"stop of a wait claim", wc, leasefile.Stop, 0, 5 * sec, DefaultStopGrace},
		{"stop of a wait claim, flag", wc, leasefile.Stop, 2 * time.Second, 5 * sec, 2 * time.Second},
	}
	for _, c := range cases {
		if got := KillGrace(f, c.c, c.v, c.flag, c.now); got != c.want {
			t.Errorf("%s: exp: %s got: %s", c.name, c.want, got)
		}
	}
	if got := KillGrace(nil, fc, leasefile.Fence, 0, 5*sec); got != DefaultStopGrace {
		t.Errorf("no file ever read exp: %s got: %s", DefaultStopGrace, got)
	}
}

func TestKeeperFencesOncePerLapse(t *testing.T) {
	dir := t.TempDir()
	s, err := LoadKeeperState(dir)
	if err != nil {
		t.Fatal(err)
	}
	fc := leasefile.Claim{AllocID: "a", VolumeID: "v", MountPath: "/m", NodeLost: "fence"}
	wc := leasefile.Claim{AllocID: "w", VolumeID: "v2", MountPath: "/m2", NodeLost: "wait"}
	stopping := fc
	stopping.Stopping = true
	now := 100 * sec
	live := file(now+sec, now+2*sec, fc, wc)

	if got, _ := s.ToFence(false, now, boot); len(got) != 0 {
		t.Fatalf("nothing ever read exp: nothing to fence got: %v", got)
	}
	if !s.Observe(live) {
		t.Fatal("first read exp: a change to save got: none")
	}
	if got, _ := s.ToFence(true, now, boot); len(got) != 0 {
		t.Fatalf("lease live exp: nothing to fence got: %v", got)
	}
	// The lease lapses: only the fence-policy claim, once.
	got, lapse := s.ToFence(true, now+sec, boot)
	if len(got) != 1 || got[0].AllocID != "a" {
		t.Fatalf("lapsed exp: a/v only got: %v", got)
	}
	s.Done[Key(got[0])] = lapse
	if err := s.Save(dir); err != nil {
		t.Fatal(err)
	}
	// A restarted keeper does not redo it, the file readable or not.
	s2, err := LoadKeeperState(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, readOK := range []bool{true, false} {
		if got, _ := s2.ToFence(readOK, now+5*sec, boot); len(got) != 0 {
			t.Fatalf("restarted keeper, fence done, read %v exp: nothing to fence got: %v", readOK, got)
		}
	}
	// The file unreadable on a restarted keeper that never fenced: the
	// claims it last saw are fenced at once, even with the deadline ahead.
	s3 := &KeeperState{Last: live, Done: map[string]string{}}
	if got, _ := s3.ToFence(false, now, boot); len(got) != 1 {
		t.Fatalf("file unreadable exp: the last known fence claim got: %v", got)
	}
	// Another boot: fenced at once.
	if got, _ := s3.ToFence(true, now, "b2"); len(got) != 1 {
		t.Fatalf("file from another boot exp: fenced got: %v", got)
	}
	// A claim the agent began to unmount and never finished is fenced
	// at the deadline all the same.
	s4 := &KeeperState{Done: map[string]string{}}
	s4.Observe(file(now+sec, now+2*sec, stopping))
	if got, _ := s4.ToFence(true, now+sec, boot); len(got) != 1 {
		t.Fatalf("stopping claim, lease lapsed exp: fenced got: %v", got)
	}
	// The agent renewed and the lease lapses again later: a new lapse,
	// fenced again.
	s2.Observe(file(now+10*sec, now+11*sec, fc, wc))
	if got, _ := s2.ToFence(true, now+9*sec, boot); len(got) != 0 {
		t.Fatalf("renewed exp: nothing to fence got: %v", got)
	}
	if got, l2 := s2.ToFence(true, now+10*sec, boot); len(got) != 1 || l2 == lapse {
		t.Fatalf("second lapse exp: fenced again under a new lapse got: %v %q (first %q)", got, l2, lapse)
	}
	// A keeper that fenced a lapse, saw the agent renew, and restarts on
	// an unreadable file fences again: the renewal was saved.
	s5 := &KeeperState{Done: map[string]string{}}
	s5.Observe(file(now+sec, now+2*sec, fc))
	_, l1 := s5.ToFence(true, now+sec, boot)
	s5.Done[Key(fc)] = l1
	if !s5.Observe(file(now+20*sec, now+21*sec, fc)) {
		t.Fatal("a renewal exp: saved got: not a change")
	}
	if err := s5.Save(dir); err != nil {
		t.Fatal(err)
	}
	s6, err := LoadKeeperState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s6.ToFence(false, now+2*sec, boot); len(got) != 1 {
		t.Fatalf("restarted on an unreadable file after a renewal exp: fenced again got: %v", got)
	}
	// A claim gone from the file (unmounted) drops its record.
	if !s2.Observe(file(now+10*sec, now+11*sec, wc)) || len(s2.Done) != 0 {
		t.Fatalf("claim gone exp: its record dropped got: %v", s2.Done)
	}
}

func TestFenceTimeout(t *testing.T) {
	ms := int64(time.Millisecond)
	if got := FenceTimeout(file(10*sec, 17*sec+500*ms), 0); got != 7500*time.Millisecond {
		t.Errorf("30 s lease exp: its 7.5 s window got: %s", got)
	}
	if got := FenceTimeout(file(10*sec, 10*sec+750*ms), 0); got != MinFenceTimeout {
		t.Errorf("3 s lease exp: at least %s got: %s", MinFenceTimeout, got)
	}
	if got := FenceTimeout(nil, 0); got != MinFenceTimeout {
		t.Errorf("no file exp: %s got: %s", MinFenceTimeout, got)
	}
	if got := FenceTimeout(file(10*sec, 11*sec), 3*time.Second); got != 3*time.Second {
		t.Errorf("flag exp: 3s got: %s", got)
	}
}
