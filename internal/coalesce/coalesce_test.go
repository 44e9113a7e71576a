package coalesce

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// asked is how many Flush calls w has seen.
func asked(w *Writer) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.asked
}

// waitAsked waits (polling, bounded) until w has seen n Flush calls.
func waitAsked(t *testing.T, w *Writer, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for asked(w) < n {
		if time.Now().After(deadline) {
			t.Fatalf("exp: %d Flush calls got: %d", n, asked(w))
		}
		time.Sleep(time.Millisecond)
	}
}

// A caller alone never lingers: each write covered only its own caller.
func TestFlushLinger_ACallerAloneDoesNotWait(t *testing.T) {
	var writes int
	w := NewLinger(func() error { writes++; return nil }, time.Hour)
	w.sleep = func(time.Duration) { t.Fatal("exp: no linger for a caller alone") }
	for range 3 {
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if writes != 3 {
		t.Fatalf("exp: 3 writes got: %d", writes)
	}
}

// Once a write covered several callers, the next one waits the linger and
// covers the callers that came meanwhile: D, E and F share one write,
// where without the linger E and F would have needed another.
func TestFlushLinger_TheNextWriteCoversTheCallersOfTheLinger(t *testing.T) {
	var writes atomic.Int64
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	w := NewLinger(func() error {
		n := writes.Add(1)
		if n <= int64(len(gates)) {
			<-gates[n-1]
		}
		return nil
	}, time.Hour)
	var wg sync.WaitGroup
	flush := func() {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Flush() }()
	}
	var lingers atomic.Int64
	w.sleep = func(time.Duration) {
		lingers.Add(1)
		flush() // E
		flush() // F
		waitAsked(t, w, 6)
	}
	flush() // A: write 1, alone
	waitAsked(t, w, 1)
	flush() // B
	flush() // C
	waitAsked(t, w, 3)
	close(gates[0]) // write 1 (A) ends; write 2 covers B and C
	deadline := time.Now().Add(10 * time.Second)
	for writes.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("exp: write 2 to begin")
		}
		time.Sleep(time.Millisecond)
	}
	flush() // D: waits for write 2
	waitAsked(t, w, 4)
	close(gates[1]) // write 2 ends having covered two: write 3 lingers
	wg.Wait()
	if writes.Load() != 3 || lingers.Load() != 1 {
		t.Fatalf("exp: 3 writes, 1 linger got: %d writes, %d lingers", writes.Load(), lingers.Load())
	}
}
