package hostdir

import "sync"

// volumeLocks serialise node calls per volume. The CSI spec lets a plugin
// expect at most one call per volume at a time, never across volumes: one
// lock for every node call made a hundred volumes changing hands at once
// wait on each other's mounts (issue 41).
type volumeLocks struct {
	mu    sync.Mutex
	locks map[string]*volumeLock
}

type volumeLock struct {
	mu   sync.Mutex
	refs int // holders and waiters: the entry goes when none are left
}

// lock takes volumeID's lock and returns its release.
func (v *volumeLocks) lock(volumeID string) func() {
	v.mu.Lock()
	if v.locks == nil {
		v.locks = map[string]*volumeLock{}
	}
	l := v.locks[volumeID]
	if l == nil {
		l = &volumeLock{}
		v.locks[volumeID] = l
	}
	l.refs++
	v.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		v.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(v.locks, volumeID)
		}
		v.mu.Unlock()
	}
}

// swTarget is where the single-node-single-writer volume is published here.
func (p *Plugin) swTarget(volumeID string) (string, bool) {
	p.swMu.Lock()
	defer p.swMu.Unlock()
	t, ok := p.swTargets[volumeID]
	return t, ok
}

func (p *Plugin) setSWTarget(volumeID, target string) {
	p.swMu.Lock()
	defer p.swMu.Unlock()
	if p.swTargets == nil {
		p.swTargets = map[string]string{}
	}
	p.swTargets[volumeID] = target
}

// forgetSWTarget forgets the volume's target if it is target.
func (p *Plugin) forgetSWTarget(volumeID, target string) {
	p.swMu.Lock()
	defer p.swMu.Unlock()
	if p.swTargets[volumeID] == target {
		delete(p.swTargets, volumeID)
	}
}
