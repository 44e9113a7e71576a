package server

import (
	"testing"
	"time"
)

// Each address gets its burst at once, then its turns at the rate; a turn
// past the longest wait is refused and takes nothing; addresses do not
// share a bucket.
func TestHandshakeRate_BurstThenPaced(t *testing.T) {
	r := newHandshakeRate(3, 10)
	now := time.Unix(1000, 0)
	for i := range 3 {
		if wait, ok := r.reserve("10.0.0.1", now, time.Second); !ok || wait != 0 {
			t.Fatalf("handshake %d of the burst exp: at once got: wait %v ok %v", i, wait, ok)
		}
	}
	// Past the burst: turns every 100 ms.
	for i, exp := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		if wait, ok := r.reserve("10.0.0.1", now, time.Second); !ok || wait != exp {
			t.Fatalf("handshake %d past the burst exp: wait %v got: %v ok %v", i, exp, wait, ok)
		}
	}
	if wait, ok := r.reserve("10.0.0.1", now, 250*time.Millisecond); ok {
		t.Fatalf("handshake whose turn is past the longest wait exp: refused got: wait %v", wait)
	}
	// The refusal took nothing: the next turn is still 300 ms away.
	if wait, ok := r.reserve("10.0.0.1", now, time.Second); !ok || wait != 300*time.Millisecond {
		t.Fatalf("turn after a refusal exp: wait 300ms got: %v ok %v", wait, ok)
	}
	if wait, ok := r.reserve("10.0.0.2", now, time.Second); !ok || wait != 0 {
		t.Fatalf("another address exp: at once got: wait %v ok %v", wait, ok)
	}
	// A second later the first address has earned 10 turns: the 3 it
	// owed, and its burst again.
	if wait, ok := r.reserve("10.0.0.1", now.Add(time.Second), time.Second); !ok || wait != 0 {
		t.Fatalf("after a second exp: at once got: wait %v ok %v", wait, ok)
	}
}

// Past maxHandshakeBuckets addresses, those whose bucket has refilled are
// forgotten.
func TestHandshakeRate_ForgetsRefilledAddresses(t *testing.T) {
	r := newHandshakeRate(2, 10)
	now := time.Unix(1000, 0)
	for i := range maxHandshakeBuckets {
		r.reserve(string(rune(i)), now, time.Second)
	}
	r.reserve("late", now.Add(time.Minute), time.Second)
	if n := len(r.buckets); n != 1 {
		t.Fatalf("buckets after every address refilled exp: 1 got: %d", n)
	}
}
