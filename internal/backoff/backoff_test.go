package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoff_DoublesToMaxAndResets(t *testing.T) {
	b := New(50*time.Millisecond, time.Second)
	want := []time.Duration{50, 100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("delay %d exp: %dms got: %s", i, w, got)
		}
	}
	b.Reset()
	if got := b.Next(); got != 50*time.Millisecond {
		t.Fatalf("delay after reset exp: 50ms got: %s", got)
	}
}

func TestBackoff_JitterStaysWithinHalfToFull(t *testing.T) {
	b := WithJitter(200*time.Millisecond, 5*time.Second)
	for i, d := 0, 200*time.Millisecond; i < 12; i, d = i+1, min(2*d, 5*time.Second) {
		if got := b.Next(); got < d/2 || got > d {
			t.Fatalf("delay %d exp: within [%s, %s] got: %s", i, d/2, d, got)
		}
	}
}

func TestSleep_EndsWithItsContext(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("sleep exp: nil got: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Minute {
		t.Fatalf("sleep with an ended context exp: context.Canceled at once got: %v after %s", err, time.Since(start))
	}
	if err := Sleep(ctx, 0); err != nil {
		t.Fatalf("sleep of 0 exp: nil at once got: %v", err)
	}
}
