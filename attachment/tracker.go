package attachment

import "sync"

// publishTracker remembers which claims this server is controller-publishing
// right now. A re-claim that finds its claim not yet published either waits
// (the publish is in flight here) or publishes itself (whoever started it is
// gone: a leader that died mid-publish).
type publishTracker struct {
	mu       sync.Mutex
	inflight map[string]bool
}

// Begin claims the right to publish key; ok is false when another call is
// publishing it. Call done when finished.
func (p *publishTracker) begin(key string) (done func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight == nil {
		p.inflight = map[string]bool{}
	}
	if p.inflight[key] {
		return nil, false
	}
	p.inflight[key] = true
	return func() {
		p.mu.Lock()
		delete(p.inflight, key)
		p.mu.Unlock()
	}, true
}
