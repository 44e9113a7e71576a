package client

import (
	"sync"
	"time"

	"github.com/claimd/claimd/structs"
)

// The node lease (decision 39). The servers' acknowledgement of a
// heartbeat renews this agent's lease: from the moment the heartbeat was
// sent, on this agent's monotonic clock, for FenceDeadline(lease). Before
// that runs out without renewal the agent fences itself (fence.go). The
// servers count the other way round (from the last heartbeat they
// received, with a margin for clock drift), so the agent has stopped
// writing before any server acts on the lease having run out.

// leaseClock is the agent's monotonic clock as a duration since the agent
// started. rate scales it against real time: 1 in production; tests run a
// node whose clock is slow or fast within the drift the lease argument
// allows (-clock-rate), to show that the margin covers it.
type leaseClock struct {
	origin time.Time
	rate   float64
}

func newLeaseClock(rate float64) leaseClock {
	if rate <= 0 {
		rate = 1
	}
	return leaseClock{origin: time.Now(), rate: rate}
}

// now reads the clock. time.Since uses the monotonic reading, so a wall
// clock step (NTP, an operator's date) changes nothing.
func (c leaseClock) now() time.Duration {
	return time.Duration(float64(time.Since(c.origin)) * c.rate)
}

// realDuration is how long in real time d of this clock takes.
func (c leaseClock) realDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.rate)
}

// nodeLease is the lease this agent holds. The zero lease (length 0) is
// off: the agent never fences and its fence-policy claims wait like
// wait-policy ones.
type nodeLease struct {
	clock  leaseClock
	length time.Duration // what this agent asks for (-node-lease)

	mu sync.Mutex
	// validUntil is the clock reading after which the lease may have run
	// out on the servers' side, less the drift allowance (FenceDeadline).
	// Zero until the first acknowledged heartbeat.
	validUntil time.Duration
	// renewed is signalled on every renewal, so the fence loop re-arms.
	renewed chan struct{}
}

func newNodeLease(length time.Duration, clock leaseClock) *nodeLease {
	return &nodeLease{clock: clock, length: length, renewed: make(chan struct{}, 1)}
}

func (l *nodeLease) enabled() bool { return l.length > 0 }

// adopt takes over a lease a previous run of this agent showed live (the
// lease file: same boot, fence start not passed), remaining being what is
// left of it in real time. Without that the lease counts as run out from
// the start: the agent cannot know how long it was away, so what it left
// mounted under the fence policy is fenced before anything else
// (startup.go).
func (l *nodeLease) adopt(remaining time.Duration) {
	if remaining <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// realDuration's inverse: this clock runs at rate against real time.
	until := l.clock.now() + time.Duration(float64(remaining)*l.clock.rate)
	if until > l.validUntil {
		l.validUntil = until
	}
}

// renew extends the lease after the servers acknowledged a heartbeat sent
// at clock reading sentAt and granted `granted` (0: the answer did not
// renew it, e.g. the server could not confirm it leads). The shorter of
// the two lengths counts: a server that knows a shorter lease for this
// node acts on that one. It returns the length that counted (0: not
// renewed).
func (l *nodeLease) renew(sentAt, granted time.Duration) time.Duration {
	if !l.enabled() || granted <= 0 {
		return 0
	}
	length := min(l.length, granted)
	until := sentAt + structs.FenceDeadline(length)
	l.mu.Lock()
	// Answers can come back out of order; a later answer to an earlier
	// heartbeat must not shorten the lease.
	if until > l.validUntil {
		l.validUntil = until
	}
	l.mu.Unlock()
	select {
	case l.renewed <- struct{}{}:
	default:
	}
	return length
}

// remaining is how much of the lease is left on this agent's clock
// (negative once it ran out; 0 before the first renewal counts as run out).
func (l *nodeLease) remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil - l.clock.now()
}

// callTimeout bounds one heartbeat with this lease: a server that hangs
// must not hold the agent past the next chance to renew elsewhere.
func (l *nodeLease) callTimeout() time.Duration {
	if !l.enabled() {
		return 30 * time.Second
	}
	return min(max(l.length/2, 2*time.Second), 30*time.Second)
}

// fenceBudget is how long before the lease runs out the agent starts to
// fence: enough to run the hook and unmount, but a small part of the lease
// so that ordinary heartbeat delays do not fence a healthy node.
func (l *nodeLease) fenceBudget() time.Duration {
	return FenceBudget(l.length)
}

// heartbeatEvery is how often a node with this lease heartbeats: several
// chances to renew before the fence budget starts.
func (l *nodeLease) heartbeatEvery(ttl time.Duration) time.Duration {
	every := ttl / 3
	if l.enabled() {
		every = min(every, l.length/4)
	}
	return every
}
