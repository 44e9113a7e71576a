package coalesce

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// Every Flush returns only after a write that saw its change: the state a
// write records is the count of changes made before it began.
func TestFlush_EveryChangeIsCoveredByAWriteThatBeganAfterIt(t *testing.T) {
	var (
		mu      sync.Mutex
		changes int
		onDisk  atomic.Int64
		writes  atomic.Int64
	)
	w := New(func() error {
		mu.Lock()
		n := changes
		mu.Unlock()
		writes.Add(1)
		onDisk.Store(int64(n))
		return nil
	})
	const callers = 64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			changes++
			mine := changes
			mu.Unlock()
			if err := w.Flush(); err != nil {
				t.Errorf("exp: no error got: %v", err)
			}
			if got := onDisk.Load(); got < int64(mine) {
				t.Errorf("exp: the written state to include change %d got: %d", mine, got)
			}
		}()
	}
	wg.Wait()
	if onDisk.Load() != callers {
		t.Fatalf("exp: %d changes written got: %d", callers, onDisk.Load())
	}
	t.Logf("%d changes, %d writes", callers, writes.Load())
}

// Writes never overlap: the state's file is written by one caller at a time.
func TestFlush_WritesNeverOverlap(t *testing.T) {
	var inside, overlaps atomic.Int64
	w := New(func() error {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		inside.Add(-1)
		return nil
	})
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Flush() }()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("exp: no overlapping writes got: %d", overlaps.Load())
	}
}

// A failed write is reported to the callers it covered, and the next
// Flush writes again.
func TestFlush_ErrorIsReportedAndTheNextFlushWritesAgain(t *testing.T) {
	fail := errors.New("disk full")
	var calls int
	w := New(func() error {
		calls++
		if calls == 1 {
			return fail
		}
		return nil
	})
	if err := w.Flush(); !errors.Is(err, fail) {
		t.Fatalf("exp: %v got: %v", fail, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("exp: the second write to succeed got: %v", err)
	}
	if calls != 2 {
		t.Fatalf("exp: 2 writes got: %d", calls)
	}
}
