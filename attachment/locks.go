package attachment

import "sync"

// Locks serialise, on the leader, every change to one volume's controller
// attachment on one node: a new claim's ControllerPublish and a past
// claim's ControllerUnpublish. Without it the release could check "no live
// claim on this node", then a new claim on that node be published and
// staged, and only then the old claim's ControllerUnpublish run — detaching
// the volume under the new claim (S3, S4; found by the chaos suite).
// Unpublish re-checks the live claims while it holds the lock.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*attachLock
}

type attachLock struct {
	mu   sync.Mutex
	refs int
}

// NewLocks makes an empty set.
func NewLocks() *Locks { return &Locks{locks: map[string]*attachLock{}} }

// Lock takes the lock of (volumeID, nodeID) and returns its unlock.
func (a *Locks) Lock(volumeID, nodeID string) func() {
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

// waiters is how many hold or wait for the lock of (volumeID, nodeID), for
// tests.
func (a *Locks) waiters(volumeID, nodeID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.locks[volumeID+"\x00"+nodeID]; l != nil {
		return l.refs
	}
	return 0
}

// pluginLocks serialise destructive controller calls per plugin (one
// ControllerUnpublish of a plugin at a time from this server).
type pluginLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (p *pluginLocks) lock(pluginID string) func() {
	p.mu.Lock()
	if p.locks == nil {
		p.locks = map[string]*sync.Mutex{}
	}
	m := p.locks[pluginID]
	if m == nil {
		m = &sync.Mutex{}
		p.locks[pluginID] = m
	}
	p.mu.Unlock()
	m.Lock()
	return m.Unlock
}
