package leasefile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	boot := "b1"
	now := int64(100 * time.Second)
	f := &File{BootID: boot, FenceAt: now + int64(time.Second), Claims: []Claim{
		{AllocID: "a", VolumeID: "v", NodeLost: "fence"},
		{AllocID: "w", VolumeID: "v2", NodeLost: "wait"},
		{AllocID: "s", VolumeID: "v3", NodeLost: "fence", Stopping: true},
	}}
	cases := []struct {
		name   string
		f      *File
		alloc  string
		vol    string
		fence  bool
		now    int64
		boot   string
		expect Verdict
	}{
		{"fence claim, lease live", f, "a", "v", true, now, boot, Hold},
		{"fence claim, lease run out", f, "a", "v", true, now + int64(2*time.Second), boot, Fence},
		{"wait claim, lease run out", f, "w", "v2", false, now + int64(2*time.Second), boot, Hold},
		{"another boot", f, "w", "v2", false, now, "b2", Fence},
		{"claim gone", f, "x", "v", true, now, boot, Stop},
		{"stopping", f, "s", "v3", true, now, boot, Stop},
		{"unreadable, fence policy", nil, "a", "v", true, now, boot, Fence},
		{"unreadable, wait policy", nil, "w", "v2", false, now, boot, Hold},
		{"never renewed", &File{BootID: boot, Claims: f.Claims}, "a", "v", true, now, boot, Fence},
	}
	for _, c := range cases {
		if got := Judge(c.f, c.alloc, c.vol, c.fence, c.now, c.boot); got != c.expect {
			t.Errorf("%s: %s, want %s", c.name, got, c.expect)
		}
	}
}

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name)
	in := &File{NodeID: "n", BootID: BootID(), FenceAt: Now(), Claims: []Claim{{AllocID: "a", VolumeID: "v", NodeLost: "fence"}}}
	if err := Write(path, in); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("stat: %v %v", st, err)
	}
	out, err := Read(path)
	if err != nil || out.NodeID != "n" || len(out.Claims) != 1 || out.FenceAt != in.FenceAt {
		t.Fatalf("read %+v, %v", out, err)
	}
	if err := os.WriteFile(path, []byte(`{"version":9}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil {
		t.Fatal("another version was read")
	}
}

func TestNowIsMonotonicAndCountsNanoseconds(t *testing.T) {
	a := Now()
	time.Sleep(10 * time.Millisecond) // the clock itself is under test
	if d := Now() - a; d < int64(10*time.Millisecond) {
		t.Fatalf("CLOCK_BOOTTIME advanced %dns over 10ms", d)
	}
}
