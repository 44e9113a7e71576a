package forward

import (
	"errors"
	"fmt"
	netrpc "net/rpc"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// beatLeader is a "Node" service that answers heartbeats singly and, when
// batches is set, in batches; it records how they arrived.
type beatLeader struct {
	mu      sync.Mutex
	singles int
	batches [][]string // node IDs per batch
}

func (l *beatLeader) answer(req *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse) error {
	if !req.Forwarded {
		return errors.New("heartbeat not marked forwarded")
	}
	if req.NodeID == "unknown" {
		return structs.NotFound("node", req.NodeID)
	}
	reply.HeartbeatTTL = time.Second
	reply.Servers = []string{"for-" + req.NodeID}
	return nil
}

// singleNode is the leader of a build without batches.
type singleNode struct{ l *beatLeader }

func (s *singleNode) UpdateStatus(req *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse) error {
	s.l.mu.Lock()
	s.l.singles++
	s.l.mu.Unlock()
	return s.l.answer(req, reply)
}

type batchNode struct{ singleNode }

func (b *batchNode) UpdateStatusBatch(req *structs.NodeHeartbeatBatchRequest, reply *structs.NodeHeartbeatBatchResponse) error {
	var ids []string
	for _, hb := range req.Heartbeats {
		ids = append(ids, hb.NodeID)
		var res structs.NodeHeartbeatResult
		if err := b.l.answer(hb, &res.Response); err != nil {
			res.Error = err.Error()
		}
		reply.Results = append(reply.Results, res)
	}
	b.l.mu.Lock()
	b.l.batches = append(b.l.batches, ids)
	b.l.mu.Unlock()
	return nil
}

func serveBeatLeader(t *testing.T, batches bool) (string, *beatLeader) {
	t.Helper()
	l := &beatLeader{}
	rs := netrpc.NewServer()
	var svc any = &singleNode{l: l}
	if batches {
		svc = &batchNode{singleNode{l: l}}
	}
	if err := rs.RegisterName("Node", svc); err != nil {
		t.Fatal(err)
	}
	return serveRPC(t, rs), l
}

// beatAll forwards n heartbeats at once (node i is "node-i", or "unknown"
// for the indexes in unknown) and returns each one's reply and error.
func beatAll(f *Forwarder, n int, unknown map[int]bool) ([]structs.NodeUpdateResponse, []error) {
	replies := make([]structs.NodeUpdateResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("node-%d", i)
			if unknown[i] {
				id = "unknown"
			}
			args := &structs.NodeUpdateStatusRequest{NodeID: id, Status: structs.NodeStatusReady}
			_, errs[i] = f.Forward("Node.UpdateStatus", args, args, &replies[i])
		}()
	}
	wg.Wait()
	return replies, errs
}

// TestHeartbeatRelay_GathersForwardedHeartbeatsIntoBatches: heartbeats a
// follower forwards at the same time reach the leader as one call, and
// each caller gets its own answer: its own reply, or its own error with
// its code intact (one unknown node fails only itself).
func TestHeartbeatRelay_GathersForwardedHeartbeatsIntoBatches(t *testing.T) {
	addr, l := serveBeatLeader(t, true)
	ls := newFakeLeader()
	ls.set(addr, false)
	f := newTestForwarder(t, ls, 2*time.Second)
	f.beats.linger = 200 * time.Millisecond // all 40 join one batch even on a busy machine

	const n = 40
	replies, errs := beatAll(f, n, map[int]bool{7: true})
	for i := range n {
		if i == 7 {
			if !errors.Is(errs[i], structs.ErrNotFound) {
				t.Errorf("heartbeat of an unknown node exp: not_found got: %v", errs[i])
			}
			continue
		}
		if errs[i] != nil || len(replies[i].Servers) != 1 || replies[i].Servers[0] != fmt.Sprintf("for-node-%d", i) {
			t.Errorf("heartbeat %d exp: its own answer got: %+v, %v", i, replies[i], errs[i])
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.singles != 0 {
		t.Errorf("single heartbeat calls exp: 0 got: %d", l.singles)
	}
	total := 0
	for _, b := range l.batches {
		total += len(b)
	}
	// 40 callers started together: a goroutine that starts late may miss
	// the first batch, but most must share one.
	if total != n || len(l.batches) > 3 {
		t.Errorf("batches exp: the %d heartbeats in at most 3 calls got: %d calls with %d heartbeats", n, len(l.batches), total)
	}
}

// TestHeartbeatRelay_FullBatchGoesAtOnce: a batch that reaches
// MaxHeartbeatBatch is sent without waiting for its linger.
func TestHeartbeatRelay_FullBatchGoesAtOnce(t *testing.T) {
	addr, l := serveBeatLeader(t, true)
	ls := newFakeLeader()
	ls.set(addr, false)
	f := newTestForwarder(t, ls, 2*time.Minute)
	f.beats.linger = time.Minute // only a full batch is sent before the test's deadline

	n := structs.MaxHeartbeatBatch
	_, errs := beatAll(f, n, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("heartbeat %d exp: answered got: %v", i, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.batches) != 1 || len(l.batches[0]) != n {
		t.Fatalf("batches exp: one of %d got: %d", n, len(l.batches))
	}
}

// TestHeartbeatRelay_LeaderWithoutBatchesGetsSingleCalls: a leader of an
// earlier build (during a rolling upgrade) does not know the batch method;
// its heartbeats are sent one by one and still answered.
func TestHeartbeatRelay_LeaderWithoutBatchesGetsSingleCalls(t *testing.T) {
	addr, l := serveBeatLeader(t, false)
	ls := newFakeLeader()
	ls.set(addr, false)
	f := newTestForwarder(t, ls, 2*time.Second)

	const n = 10
	replies, errs := beatAll(f, n, map[int]bool{3: true})
	for i := range n {
		if i == 3 {
			if !errors.Is(errs[i], structs.ErrNotFound) {
				t.Errorf("heartbeat of an unknown node exp: not_found got: %v", errs[i])
			}
			continue
		}
		if errs[i] != nil || replies[i].HeartbeatTTL != time.Second {
			t.Errorf("heartbeat %d exp: answered got: %+v, %v", i, replies[i], errs[i])
		}
	}
	// Later heartbeats go straight to single calls.
	beatAll(f, 1, nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.singles != n+1 || len(l.batches) != 0 {
		t.Fatalf("exp: %d single calls, no batch got: %d single, %d batches", n+1, l.singles, len(l.batches))
	}
}
