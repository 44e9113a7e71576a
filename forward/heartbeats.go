package forward

import (
	"context"
	"fmt"
	netrpc "net/rpc"
	"strings"
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/structs"
)

// HeartbeatLinger is how long a follower holds a client agent's heartbeat
// to send it to the leader with others (decision 43). Agents heartbeat
// every third of the TTL (seconds), so a few milliseconds more are nothing
// to them; gathered for this long, a follower receiving 500 heartbeats a
// second sends the leader about 40 calls instead of 500.
const HeartbeatLinger = 25 * time.Millisecond

// heartbeatRelay gathers the heartbeats this server forwards and sends them
// to the leader together, as one Node.UpdateStatusBatch call per leader
// address and linger. A heartbeat is the one call a cluster receives from
// every node every few seconds whatever it is doing, so at thousands of
// nodes its per-call cost (a stream read, a decode, a write syscall) is
// most of an idle leader's CPU. Each heartbeat keeps its own token and
// origin and gets its own answer or error, so the forwarder's retry rules
// apply to it as to a single call.
type heartbeatRelay struct {
	pool        *Pool
	serverToken func() string
	linger      time.Duration

	mu     sync.Mutex
	queues map[string][]*relayedBeat // by leader address
	// single holds leaders that do not serve batches (a build from before
	// them, during a rolling upgrade) until when their heartbeats go one
	// by one; then a batch is tried again.
	single map[string]time.Time
}

// singleFor is how long a leader that refused a batch gets heartbeats one
// by one before a batch is tried again (it may have been upgraded).
const singleFor = time.Minute

type relayedBeat struct {
	req  structs.NodeUpdateStatusRequest
	done chan beatOutcome
}

type beatOutcome struct {
	resp structs.NodeUpdateResponse
	err  error
}

func newHeartbeatRelay(pool *Pool, serverToken func() string) *heartbeatRelay {
	if serverToken == nil {
		serverToken = func() string { return "" }
	}
	return &heartbeatRelay{pool: pool, serverToken: serverToken, linger: HeartbeatLinger,
		queues: map[string][]*relayedBeat{}, single: map[string]time.Time{}}
}

// send forwards one heartbeat to the leader at addr and waits for its own
// answer. The request is copied: the caller may change or reuse it as soon
// as send returns, even while its batch is still on the wire.
func (r *heartbeatRelay) send(ctx context.Context, addr string, req *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse) error {
	r.mu.Lock()
	if time.Now().Before(r.single[addr]) {
		r.mu.Unlock()
		return r.pool.RPC(ctx, addr, "Node.UpdateStatus", req, reply)
	}
	b := &relayedBeat{req: *req, done: make(chan beatOutcome, 1)}
	q := append(r.queues[addr], b)
	r.queues[addr] = q
	switch {
	case len(q) >= structs.MaxHeartbeatBatch:
		delete(r.queues, addr)
		go r.flush(addr, q)
	case len(q) == 1:
		// The first of a batch starts its clock.
		time.AfterFunc(r.linger, func() { r.flushQueued(addr, q[0]) })
	}
	r.mu.Unlock()
	select {
	case out := <-b.done:
		*reply = out.resp
		return out.err
	case <-ctx.Done():
		return structs.NewError(structs.CodeTimeout, fmt.Sprintf("Node.UpdateStatus: %v", ctx.Err()))
	}
}

// flushQueued sends the batch that first opened, unless it was already
// sent full.
func (r *heartbeatRelay) flushQueued(addr string, first *relayedBeat) {
	r.mu.Lock()
	q := r.queues[addr]
	if len(q) == 0 || q[0] != first {
		r.mu.Unlock()
		return
	}
	delete(r.queues, addr)
	r.mu.Unlock()
	r.flush(addr, q)
}

func (r *heartbeatRelay) flush(addr string, q []*relayedBeat) {
	metrics.AddSample([]string{"forward", "heartbeat_batch", "size"}, float32(len(q)))
	args := &structs.NodeHeartbeatBatchRequest{Heartbeats: make([]*structs.NodeUpdateStatusRequest, len(q))}
	// The batch is this server's own call (its certificate, or the server
	// token); the items keep their agents' tokens and origins.
	args.AuthToken = r.serverToken()
	for i, b := range q {
		args.Heartbeats[i] = &b.req
	}
	// As long as a single forwarded call may take; the leader serves a
	// batch in milliseconds.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var resp structs.NodeHeartbeatBatchResponse
	err := r.pool.RPC(ctx, addr, "Node.UpdateStatusBatch", args, &resp)
	if err != nil && unknownMethod(err) {
		r.mu.Lock()
		r.single[addr] = time.Now().Add(singleFor)
		r.mu.Unlock()
		r.sendOneByOne(ctx, addr, q)
		return
	}
	if err == nil && len(resp.Results) != len(q) {
		err = structs.NewError(structs.CodeUnavailable, fmt.Sprintf("heartbeat batch of %d: the leader answered %d", len(q), len(resp.Results)))
	}
	for i, b := range q {
		if err != nil {
			b.done <- beatOutcome{err: err}
			continue
		}
		res := resp.Results[i]
		b.done <- beatOutcome{resp: res.Response, err: itemError(res.Error)}
	}
}

// sendOneByOne serves a batch the leader cannot take as single calls.
func (r *heartbeatRelay) sendOneByOne(ctx context.Context, addr string, q []*relayedBeat) {
	for _, b := range q {
		var out beatOutcome
		out.err = r.pool.RPC(ctx, addr, "Node.UpdateStatus", &b.req, &out.resp)
		b.done <- out
	}
}

// unknownMethod: the leader's build has no such method (net/rpc's own
// answer, which names no error code).
func unknownMethod(err error) bool {
	return strings.Contains(err.Error(), "rpc: can't find method")
}

// itemError restores one heartbeat's error as its own call would have
// returned it: the text crossed the wire as a server error's does.
func itemError(msg string) error {
	if msg == "" {
		return nil
	}
	return structs.ParseError(netrpc.ServerError(msg))
}
