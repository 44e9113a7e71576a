package endpoints

import "sync"

// PublishTracker remembers which claims this server is controller-publishing
// right now. A re-claim that finds its claim not yet published either waits
// (the publish is in flight here) or publishes itself (whoever started it is
// gone: a leader that died mid-publish). It lives in the server, not in the
// per-connection endpoints.
type PublishTracker struct {
	mu       sync.Mutex
	inflight map[string]bool
}

// NewPublishTracker makes an empty tracker.
func NewPublishTracker() *PublishTracker {
	return &PublishTracker{inflight: map[string]bool{}}
}

// Begin claims the right to publish key; ok is false when another call is
// publishing it. Call done when finished.
func (p *PublishTracker) Begin(key string) (done func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
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
