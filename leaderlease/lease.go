// Package leaderlease is the leader's storage lease (decision 46): the
// proof a server needs before it makes a storage call (a plugin or node
// call on behalf of the replicated state), and how long that proof is good
// for.
//
// The proof is a committed entry: an entry this server appended at time t
// and saw committed in the same tenure shows that no other leader was
// elected before t (the quorum that stored the entry and the quorum that
// elects any later leader share a voter, which stored the entry before it
// voted, since after voting it refuses the old term). A call is made only
// within structs.FenceDeadline(lease) of t on this server's monotonic
// clock, carries that deadline, and a new leader makes no storage call
// until structs.LeaseExpiry(lease) after it took office, which is after t.
// So, with clock rates within structs.LeaseClockDrift, every call an old
// leader made has reached its deadline before a new leader makes its
// first: a leader that was paused, starved or cut off and resumes on
// stale state finds its lease run out, confirms again, and fails.
//
// The claim path pays nothing: the claim's own commit is the proof its
// publish needs. Other work (a release, a repair) started when the last
// proof is older than half the lease confirms first, with one Barrier.
package leaderlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/claimd/claimd/structs"
)

// Default is the storage lease when none is configured: the longest one
// storage call may take, and how long a new leader waits before its first.
const Default = 10 * time.Second

// Min and Max bound a configured lease. Below Min a call's window (half
// to 95% of the lease) is too short for a plugin on a busy machine.
const (
	Min = 5 * time.Second
	Max = 5 * time.Minute
)

// Validate checks a configured lease (0 means Default).
func Validate(field string, d time.Duration) error {
	if d == 0 || (d >= Min && d <= Max) {
		return nil
	}
	return structs.Invalid(field, fmt.Sprintf("%s is outside %s to %s", d, Min, Max))
}

// Lease tracks one server's storage lease across its tenures as leader.
// Safe for concurrent use.
type Lease struct {
	duration time.Duration
	// confirm appends an entry and waits for it to commit (raft.Barrier);
	// it fails when this server does not lead.
	confirm func() error
	now     func() time.Time

	mu      sync.Mutex
	epoch   uint64 // counts tenures; the current one while leading
	leading bool
	// holdoffEnd is when this tenure may make its first storage call;
	// holdoffChanged is closed when it is waived.
	holdoffEnd     time.Time
	holdoffChanged chan struct{}
	confirmed      time.Time // when the newest proof of this tenure was appended
	renewal        *renewal  // a confirm in flight, shared by its waiters
}

type renewal struct {
	done chan struct{}
	err  error
}

// New makes a lease of duration (0: Default). confirm must commit an entry
// appended after it is called.
func New(duration time.Duration, confirm func() error) *Lease {
	if duration == 0 {
		duration = Default
	}
	return &Lease{duration: duration, confirm: confirm, now: time.Now}
}

// Duration is the configured lease.
func (l *Lease) Duration() time.Duration { return l.duration }

// Won starts a tenure. Call it when Raft reports that this server leads,
// before anything of the tenure is applied: the hold-off counts from here.
func (l *Lease) Won() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	l.leading = true
	l.holdoffEnd = l.now().Add(l.Holdoff())
	l.holdoffChanged = make(chan struct{})
	l.confirmed = time.Time{}
}

// WaiveHoldoff ends this tenure's hold-off at once. Only for a leader
// whose state (read after its Barrier, so with everything earlier leaders
// committed) shows that no earlier leader could have made a storage call:
// a call goes to a registered node, and every node there registered in
// this tenure.
func (l *Lease) WaiveHoldoff() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading && !l.holdoffEnd.IsZero() {
		l.holdoffEnd = time.Time{}
		close(l.holdoffChanged)
	}
}

// Lost ends the tenure: every grant of it fails from now on. A call
// waiting out the tenure's hold-off is woken to fail at once: otherwise it
// waited for the hold-off's end (up to LeaseExpiry) before it saw the
// tenure was over, and held up the step-down (or shutdown) that waits
// for the leader's duties to stop.
func (l *Lease) Lost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading = false
	if !l.holdoffEnd.IsZero() {
		l.holdoffEnd = time.Time{}
		close(l.holdoffChanged)
	}
}

// Mark is taken before an entry is appended: the tenure and the time.
type Mark struct {
	epoch uint64
	at    time.Time
}

// Mark returns the moment an append starts; pass it to Confirmed once the
// entry has committed.
func (l *Lease) Mark() Mark {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return Mark{}
	}
	return Mark{epoch: l.epoch, at: l.now()}
}

// Confirmed records that an entry appended at m committed: the proof moves
// up to m, if m is of the current tenure.
func (l *Lease) Confirmed(m Mark) {
	if m.epoch == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading && m.epoch == l.epoch && m.at.After(l.confirmed) {
		l.confirmed = m.at
	}
}

// Holdoff is how long a new leader waits after taking office before its
// first storage call: longer than any call of an earlier leader can last.
func (l *Lease) Holdoff() time.Duration { return structs.LeaseExpiry(l.duration) }

// callWindow is how long after its proof a storage call may still run.
func (l *Lease) callWindow() time.Duration { return structs.FenceDeadline(l.duration) }

// Begin starts a storage operation. Call it before reading the state the
// operation decides on: its calls are made only if this tenure is still
// the current one when they start.
func (l *Lease) Begin() (*Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return nil, notLeading()
	}
	return &Grant{l: l, epoch: l.epoch}, nil
}

func notLeading() error {
	return structs.NewError(structs.CodeNoLeader, "this server does not lead: storage calls are made only by the leader")
}

// HoldoffError is a storage call refused because this leader's hold-off
// has not passed yet; Until says when it does.
type HoldoffError struct{ Until time.Time }

func (e *HoldoffError) Error() string {
	return fmt.Sprintf("%s: this leader took office recently and makes no storage call before %s, "+
		"when every call of an earlier leader has ended; retry", structs.CodeUnavailable, e.Until.Round(0).UTC().Format(time.RFC3339Nano))
}

// Is makes a hold-off retryable wherever unavailable is.
func (e *HoldoffError) Is(target error) bool { return target == structs.ErrUnavailable }

// ClaimdCode keeps the code when the error is wrapped or crosses the wire.
func (e *HoldoffError) ClaimdCode() structs.ErrorCode { return structs.CodeUnavailable }

// Grant is one storage operation's right to call, tied to the tenure in
// which it began.
type Grant struct {
	l     *Lease
	epoch uint64
}

// Context returns the context for one storage call: it ends when the
// lease does. It fails when the tenure the grant began in is over, and,
// while this leader's hold-off lasts, waits for it (as long as wait
// allows) or returns a HoldoffError. A proof older than half the lease is
// renewed first (one Barrier, also bounded by wait), so every call gets at
// least half the lease's window.
func (g *Grant) Context(wait context.Context) (context.Context, context.CancelFunc, error) {
	l := g.l
	for {
		l.mu.Lock()
		if !l.leading || l.epoch != g.epoch {
			l.mu.Unlock()
			return nil, nil, structs.NewError(structs.CodeNoLeader,
				"leadership changed since this storage operation read the state; nothing was called")
		}
		now := l.now()
		if until := l.holdoffEnd; now.Before(until) {
			changed := l.holdoffChanged
			l.mu.Unlock()
			t := time.NewTimer(until.Sub(now))
			select {
			case <-t.C:
				continue
			case <-changed:
				t.Stop()
				continue
			case <-wait.Done():
				t.Stop()
				return nil, nil, &HoldoffError{Until: until}
			}
		}
		deadline := l.confirmed.Add(l.callWindow())
		if !l.confirmed.IsZero() && deadline.Sub(now) >= l.callWindow()/2 {
			l.mu.Unlock()
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			return ctx, cancel, nil
		}
		r := l.renewLocked()
		l.mu.Unlock()
		select {
		case <-r.done:
		case <-wait.Done():
			return nil, nil, structs.NewError(structs.CodeTimeout, "confirming leadership before a storage call: "+wait.Err().Error())
		}
		if r.err != nil {
			return nil, nil, structs.NewError(structs.CodeNoLeader,
				"this server could not confirm that it still leads; no storage call was made: "+r.err.Error())
		}
	}
}

// renewLocked starts a confirmation, or joins the one in flight.
func (l *Lease) renewLocked() *renewal {
	if l.renewal != nil {
		return l.renewal
	}
	r := &renewal{done: make(chan struct{})}
	l.renewal = r
	m := Mark{epoch: l.epoch, at: l.now()}
	go func() {
		err := l.confirm()
		if err == nil {
			l.Confirmed(m)
		}
		l.mu.Lock()
		l.renewal = nil
		l.mu.Unlock()
		r.err = err
		close(r.done)
	}()
	return r
}
