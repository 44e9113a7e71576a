package csi

import (
	"context"
	"sync"
)

// keyedLock is a set of mutexes, one per key, created on demand and dropped
// when unused. Acquiring one honours a context, so a caller queued behind a
// plugin call that hangs can give up.
type keyedLock struct {
	mu    sync.Mutex
	locks map[string]*keyedLockEntry
}

type keyedLockEntry struct {
	ch   chan struct{} // holds one token while locked
	refs int           // holders plus waiters; the entry goes at zero
}

func (k *keyedLock) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*keyedLockEntry)
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedLockEntry{ch: make(chan struct{}, 1)}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-e.ch
			release()
		})
	}, nil
}
