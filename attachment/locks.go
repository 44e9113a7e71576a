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

// pluginLocks bound destructive controller calls per plugin: at most the
// plugin's limit (structs.Plugin.ControllerCallLimit, one unless its
// controllers' operators said more) of its ControllerUnpublish calls run at
// once from this server, and never two of one volume (the CSI spec has the
// CO send one call per volume at a time; the (volume, node) locks alone
// would let a volume's detaches from two nodes overlap). One at a time is
// the safe default (decision 9): many back ends do not tolerate concurrent
// attach changes; a plugin that does would otherwise pay one round trip per
// volume when many change hands at once (decision 57).
type pluginLocks struct {
	mu       sync.Mutex
	cond     *sync.Cond
	inFlight map[string]int
	volumes  map[string]bool // volumes with a call in flight
	waiting  map[string]int  // calls waiting for a place, for tests
}

// lock waits until fewer than limit calls of the plugin run and none of
// the volume, and takes a place. The limit is read per call: a lower one
// takes effect as the calls above it end.
func (p *pluginLocks) lock(pluginID, volumeID string, limit int) func() {
	limit = max(limit, 1)
	p.mu.Lock()
	if p.cond == nil {
		p.cond = sync.NewCond(&p.mu)
		p.inFlight, p.volumes, p.waiting = map[string]int{}, map[string]bool{}, map[string]int{}
	}
	p.waiting[pluginID]++
	for p.inFlight[pluginID] >= limit || p.volumes[volumeID] {
		p.cond.Wait()
	}
	if p.waiting[pluginID]--; p.waiting[pluginID] == 0 {
		delete(p.waiting, pluginID)
	}
	p.inFlight[pluginID]++
	p.volumes[volumeID] = true
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if p.inFlight[pluginID]--; p.inFlight[pluginID] == 0 {
			delete(p.inFlight, pluginID)
		}
		delete(p.volumes, volumeID)
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// counts is how many controller calls of the plugin hold a place and how
// many wait for one, for tests.
func (p *pluginLocks) counts(pluginID string) (inFlight, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight[pluginID], p.waiting[pluginID]
}

// controllerCallLimit reads the plugin's limit from the state (its
// instances and admissions: a summary has neither). A read that fails
// gives the safe one.
func (m *Manager) controllerCallLimit(pluginID string) int {
	plug, err := m.state.State().PluginByID(nil, pluginID)
	if err != nil {
		return 1
	}
	return plug.ControllerCallLimit()
}
