// Package backoff paces retries: capped exponential delays, with or without
// jitter, and a sleep that ends with its context. The client agent and the
// Go client (package api) retry with it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out capped exponential delays: the first is base, each
// next one twice the last, never more than max. With jitter, each delay
// is drawn evenly from [d/2, d] instead, so that many callers that failed
// together do not retry together. Not safe for concurrent use.
type Backoff struct {
	base, max, cur time.Duration
	jitter         bool
}

// New makes a Backoff without jitter: base, 2*base, 4*base, ... max.
func New(base, max time.Duration) *Backoff {
	return &Backoff{base: base, max: max, cur: base}
}

// WithJitter makes a Backoff whose delays are drawn from [d/2, d].
func WithJitter(base, max time.Duration) *Backoff {
	b := New(base, max)
	b.jitter = true
	return b
}

// Next returns the delay before the next try.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	if b.jitter {
		d = b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
	}
	b.cur = min(b.cur*2, b.max)
	return d
}

// Reset starts again from base (after a success).
func (b *Backoff) Reset() { b.cur = b.base }

// Sleep waits for d, or until ctx ends: then it returns ctx's error. A d
// of zero or less returns nil at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
