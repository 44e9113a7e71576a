package server

import (
	"sync"
	"time"
)

// What TLS handshakes one remote address may start (issue 38: a flood
// that dialled 150 sessions at once had the leader run 150 handshakes
// together; they are a millisecond or two of CPU each, all runnable at
// once, and on a loaded two-core machine Raft's heartbeats queued behind
// them long enough for the leader to step down). Past the burst a new
// handshake waits for its turn, holding its opening slot (maxOpeningPerIP
// bounds those), and one that would wait past the server's handshake
// bound (Config.TLSHandshakeTimeout) is refused at once.
const (
	// handshakeBurstPerIP handshakes may start at once from one address:
	// a test cluster of a dozen agents and its CLIs starting together
	// start without waiting (the scale run's 50 shared sessions wait
	// half a second at most).
	handshakeBurstPerIP = 32
	// handshakesPerSecondPerIP after the burst: `claimd bench` opens its
	// callers' sessions one after another (256 take a few seconds more),
	// and one address cannot keep more than a few percent of a core
	// busy with handshakes.
	handshakesPerSecondPerIP = 64
	// maxHandshakeBuckets bounds the addresses remembered; past it the
	// ones whose bucket has refilled are forgotten.
	maxHandshakeBuckets = 4096
)

// handshakeRate is a token bucket per remote address.
type handshakeRate struct {
	mu      sync.Mutex
	buckets map[string]*handshakeBucket
	burst   float64
	perSec  float64
}

type handshakeBucket struct {
	tokens float64
	at     time.Time
}

func newHandshakeRate(burst, perSec float64) *handshakeRate {
	return &handshakeRate{buckets: map[string]*handshakeBucket{}, burst: burst, perSec: perSec}
}

// reserve takes a turn for a handshake from ip and says how long to wait
// for it; past maxWait it takes nothing and returns ok false.
func (r *handshakeRate) reserve(ip string, now time.Time, maxWait time.Duration) (wait time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[ip]
	if b == nil {
		if len(r.buckets) >= maxHandshakeBuckets {
			r.forgetFull(now)
		}
		b = &handshakeBucket{tokens: r.burst, at: now}
		r.buckets[ip] = b
	}
	b.tokens = min(r.burst, b.tokens+now.Sub(b.at).Seconds()*r.perSec)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	wait = time.Duration((1 - b.tokens) / r.perSec * float64(time.Second))
	if wait > maxWait {
		return 0, false
	}
	b.tokens--
	return wait, true
}

func (r *handshakeRate) forgetFull(now time.Time) {
	for ip, b := range r.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*r.perSec >= r.burst {
			delete(r.buckets, ip)
		}
	}
}
