package watcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/claimd/claimd/attachment"
	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

func TestSetBackoff_NextDelaysUseTheNewValues(t *testing.T) {
	w := New(Config{BackoffBase: time.Hour, BackoffMax: 2 * time.Hour}, nil, nil, nil)
	w.SetBackoff(10*time.Millisecond, 40*time.Millisecond)
	for attempt, max := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 9: 40 * time.Millisecond} {
		if d := w.backoff(attempt); d < max/2 || d > max {
			t.Fatalf("backoff(%d) after SetBackoff exp: in [%s, %s] got: %s", attempt, max/2, max, d)
		}
	}
	w.SetBackoff(0, -1) // ignored
	if d := w.backoff(9); d > 40*time.Millisecond {
		t.Fatalf("backoff after SetBackoff(0, -1) exp: unchanged (<= 40ms) got: %s", d)
	}
}

// A past claim whose eval was lost waits for the claim GC; shortening
// the GC interval on a running leader makes the GC find it now rather
// than an hour later.
func TestSetGCInterval_RunningLeaderPicksItUp(t *testing.T) {
	l := fsmtest.New()
	setup(t, l)
	evals, _ := l.State().EvalsByStatus(nil, structs.EvalStatusPending)
	for _, e := range evals {
		l.Must(t, structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: e.ID, Status: structs.EvalStatusFailed, StatusDescription: "lost, for the test"})
	}
	w := New(Config{GCInterval: time.Hour, BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}, l, l, attachment.New(l, &recordingCSI{}, fsmtest.HeldLease(), nil))
	w.SetEnabled(true)
	defer w.SetEnabled(false)
	w.SetGCInterval(20 * time.Millisecond)
	if got := w.gcInterval(); got != 20*time.Millisecond {
		t.Fatalf("gc interval exp: 20ms got: %s", got)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if err := freed(l); err != nil {
			return fmt.Errorf("after SetGCInterval(20ms): %w", err)
		}
		return nil
	})
}

func TestHeartbeatsSetTTL(t *testing.T) {
	h := NewHeartbeats(nil, nil, 10*time.Second, 5*time.Second, nil)
	h.SetTTL(30*time.Second, 15*time.Second)
	if got := h.TTL(); got != 30*time.Second {
		t.Fatalf("ttl exp: 30s got: %s", got)
	}
	h.SetTTL(0, 0) // ignored
	if got := h.TTL(); got != 30*time.Second {
		t.Fatalf("ttl after SetTTL(0) exp: 30s got: %s", got)
	}
}
