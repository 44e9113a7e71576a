package forward

import (
	"context"
	"errors"
	"time"

	"github.com/claimd/claimd/structs"
)

// HoldTimeout is how long a request waits for a leader before failing with
// no_leader. An election at production timings takes 1-3 s; 5 s rides one
// out with margin while still failing fast enough for a caller to notice a
// cluster that has lost quorum.
const HoldTimeout = 5 * time.Second

// LeaderSource tells the forwarder who leads. Implemented by the server over
// its Raft node; called on every request, so it must be cheap.
type LeaderSource interface {
	// Leader returns the leader's RPC address and whether it is this server.
	Leader() (addr string, isSelf bool)
	// LeaderChanged returns a channel closed at the next leadership change
	// observed by this server, to wake held requests.
	LeaderChanged() <-chan struct{}
}

// WriteRefuser is implemented by a LeaderSource whose server can say why
// its own log store refuses writes (a full disk). A write held for want
// of a leader is answered with that reason too: a server whose store
// fails every append loses each leadership it wins, and "no cluster
// leader" alone would hide why.
type WriteRefuser interface {
	WriteRefusal() error
}

// Forwarder implements forward-or-serve.
type Forwarder struct {
	pool   *Pool
	leader LeaderSource
	hold   time.Duration
	// ShutdownCh stops held requests when the server stops.
	shutdownCh <-chan struct{}
	// beats sends client agents' heartbeats to the leader in batches.
	beats *heartbeatRelay
}

// New makes a forwarder. serverToken is the cluster's server token ("" or
// nil when ACLs are off), shown on the calls the forwarder makes as a
// server (the heartbeat batches).
func New(pool *Pool, leader LeaderSource, shutdownCh <-chan struct{}, serverToken func() string) *Forwarder {
	return &Forwarder{pool: pool, leader: leader, hold: HoldTimeout, shutdownCh: shutdownCh,
		beats: newHeartbeatRelay(pool, serverToken)}
}

// Pool returns the connection pool for direct server-to-server calls.
func (f *Forwarder) Pool() *Pool { return f.pool }

// Forward is the first line of every endpoint:
//
//	if done, err := e.srv.Forward("Volume.Register", args, args, reply); done { return err }
//
// It returns done=false when this server must serve the request itself: a
// stale read, a request already forwarded once, or this server is the
// leader. Otherwise it sends the request to the leader (holding while there
// is none) and returns done=true with the leader's answer in reply.
func (f *Forwarder) Forward(method string, info structs.RPCInfo, args, reply any) (done bool, err error) {
	if info.IsRead() && info.AllowStaleRead() {
		return false, nil
	}
	if info.IsForwarded() {
		// One hop only. If we are not the leader any more, say so: the
		// forwarding server holds and retries.
		if _, self := f.leader.Leader(); !self {
			return true, structs.NewError(structs.CodeNoLeader, "forwarded to a server that is not the leader")
		}
		return false, nil
	}

	// The leader serves the call itself, the common case: answered
	// before the clock read, the hold timer (an allocation, then its
	// stop) and the deferred count below, which only a call that is
	// forwarded or held needs.
	if _, self := f.leader.Leader(); self {
		return false, nil
	}
	// Counted and timed when the leader (or the hold) answers: the time a
	// caller waits on this hop, a held request's wait for a leader
	// included.
	start := time.Now()
	defer func() {
		if done {
			countForward(method, start, err)
		}
	}()
	deadline := time.NewTimer(f.hold)
	defer deadline.Stop()
	for {
		changed := f.leader.LeaderChanged()
		addr, self := f.leader.Leader()
		if self {
			return false, nil
		}
		var err error
		if addr != "" {
			err = f.send(addr, method, info, args, reply)
			if err == nil || !retryable(method, args, err) {
				return true, err
			}
		} else {
			err = structs.ErrNoLeader
		}
		// Wait for a leadership change, a short pause (a stale leader
		// address may not change our view quickly), shutdown or the deadline.
		pause := time.NewTimer(100 * time.Millisecond)
		select {
		case <-changed:
		case <-pause.C:
		case <-deadline.C:
			pause.Stop()
			if errors.Is(err, structs.ErrNoLeader) {
				return true, f.explainNoLeader(info, err)
			}
			if !notApplied(err) {
				// An idempotent write whose last try's outcome is
				// unknown: say so, not "no leader" (which promises
				// that nothing was applied).
				return true, err
			}
			return true, structs.NewError(structs.CodeNoLeader, "no reachable leader: "+err.Error())
		case <-f.shutdownCh:
			pause.Stop()
			return true, structs.ErrShutdown
		}
		pause.Stop()
	}
}

func (f *Forwarder) send(addr, method string, info structs.RPCInfo, args, reply any) error {
	// Marked only while it is out: if the leader turns out to be this
	// server after a failed try, it is served here as the caller's own.
	info.SetForwarded(true)
	defer info.SetForwarded(false)
	// Blocking queries may wait up to their MaxQueryTime at the leader.
	timeout := 30 * time.Second
	if q, ok := info.(interface{ QueryWait() time.Duration }); ok {
		timeout += q.QueryWait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if beat, ok := args.(*structs.NodeUpdateStatusRequest); ok && method == "Node.UpdateStatus" {
		return f.beats.send(ctx, addr, beat, reply.(*structs.NodeUpdateResponse))
	}
	return f.pool.RPC(ctx, addr, method, args, reply)
}

// explainNoLeader adds this server's write refusal, if any, to a write's
// no-leader answer. The code stays no_leader: nothing was applied.
func (f *Forwarder) explainNoLeader(info structs.RPCInfo, err error) error {
	wr, ok := f.leader.(WriteRefuser)
	if !ok || info.IsRead() {
		return err
	}
	if why := wr.WriteRefusal(); why != nil {
		return NoLeaderRefusing(why)
	}
	return err
}

// NoLeaderRefusing is the no-leader answer of a server whose own log store
// refuses writes (why).
func NoLeaderRefusing(why error) error {
	return structs.NewError(structs.CodeNoLeader, "no cluster leader; this server cannot take writes: "+why.Error())
}
