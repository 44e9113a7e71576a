package watcher

import "sync"

// AttachLocks serialise, on the leader, every change to one volume's
// controller attachment on one node: a new claim's ControllerPublish and a
// past claim's ControllerUnpublish. Without it the watcher could check "no
// live claim on this node", then a new claim on that node be published and
// staged, and only then the old claim's ControllerUnpublish run — detaching
// the volume under the new claim (S3, S4; found by the chaos suite). The
// watcher re-checks the live claims while it holds the lock.
type AttachLocks struct {
	mu    sync.Mutex
	locks map[string]*attachLock
}

type attachLock struct {
	mu   sync.Mutex
	refs int
}

// NewAttachLocks makes an empty set.
func NewAttachLocks() *AttachLocks { return &AttachLocks{locks: map[string]*attachLock{}} }

// Lock takes the lock of (volumeID, nodeID) and returns its unlock.
func (a *AttachLocks) Lock(volumeID, nodeID string) func() {
	key := volumeID + "\x00" + nodeID
	a.mu.Lock()
	l := a.locks[key]
	if l == nil {
		l = &attachLock{}
		a.locks[key] = l
	}
	l.refs++
	a.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		a.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(a.locks, key)
		}
		a.mu.Unlock()
	}
}
