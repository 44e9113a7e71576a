package forward

import (
	"errors"
	"net"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// fakeLeader is a LeaderSource a test can change.
type fakeLeader struct {
	mu      sync.Mutex
	addr    string
	self    bool
	changed chan struct{}
}

func newFakeLeader() *fakeLeader { return &fakeLeader{changed: make(chan struct{})} }

func (f *fakeLeader) Leader() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addr, f.self
}

func (f *fakeLeader) LeaderChanged() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeLeader) set(addr string, self bool) {
	f.mu.Lock()
	f.addr, f.self = addr, self
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

type WriteArgs struct {
	Value string
	structs.WriteRequest
}

// Leader is the remote "leader" service: it records forwarded writes.
type Leader struct {
	calls     atomic.Int64
	forwarded atomic.Int64
}

func (l *Leader) Write(args *WriteArgs, reply *string) error {
	l.calls.Add(1)
	if args.Forwarded {
		l.forwarded.Add(1)
	}
	*reply = "leader:" + args.Value
	return nil
}

// mustServeLeader runs the Leader service on loopback, speaking ProtoMux.
func mustServeLeader(t *testing.T) (string, *Leader) {
	t.Helper()
	svc := &Leader{}
	rs := netrpc.NewServer()
	if err := rs.RegisterName("Test", svc); err != nil {
		t.Fatal(err)
	}
	return serveRPC(t, rs), svc
}

// serveRPC serves rs on loopback as a claimd server does: ProtoMux, then a
// codec per yamux stream.
func serveRPC(t *testing.T, rs *netrpc.Server) string {
	return testutil.ServeLoopback(t, func(c net.Conn) {
		if _, ok := testutil.ReadProtocolByte(c); !ok {
			return
		}
		testutil.ServeMuxStreams(c, rpc.YamuxConfig(hclog.NewNullLogger()), nil, func(s net.Conn) {
			rs.ServeCodec(rpc.NewServerCodec(s, rpc.MaxRequestBytes))
		})
	})
}

func newTestForwarder(t *testing.T, ls LeaderSource, hold time.Duration) *Forwarder {
	pool := NewPool(nil, nil)
	t.Cleanup(pool.Shutdown)
	f := New(pool, ls, make(chan struct{}), nil)
	f.hold = hold
	return f
}

func TestForward_ServesLocallyOnLeaderAndForStaleReads(t *testing.T) {
	ls := newFakeLeader()
	ls.set("", true)
	f := newTestForwarder(t, ls, time.Second)
	if done, _ := f.Forward("Test.Write", &WriteArgs{}, nil, nil); done {
		t.Fatal("on the leader exp: serve locally got: forwarded")
	}
	ls.set("127.0.0.1:1", false)
	q := &structs.GenericRequest{QueryOptions: structs.QueryOptions{AllowStale: true}}
	if done, _ := f.Forward("Test.Read", q, q, nil); done {
		t.Fatal("stale read exp: serve locally got: forwarded")
	}
}

func TestForward_FollowerSendsToLeaderOnceMarkedForwarded(t *testing.T) {
	addr, svc := mustServeLeader(t)
	ls := newFakeLeader()
	ls.set(addr, false)
	f := newTestForwarder(t, ls, time.Second)
	args := &WriteArgs{Value: "x"}
	var reply string
	done, err := f.Forward("Test.Write", args, args, &reply)
	if !done || err != nil || reply != "leader:x" {
		t.Fatalf("exp: forwarded reply leader:x got: done=%v %q %v", done, reply, err)
	}
	if svc.forwarded.Load() != 1 {
		t.Fatalf("leader forwarded calls exp: 1 got: %d", svc.forwarded.Load())
	}
}

func TestForward_AlreadyForwardedRequestIsNeverForwardedAgain(t *testing.T) {
	ls := newFakeLeader()
	ls.set("127.0.0.1:1", false) // another server leads
	f := newTestForwarder(t, ls, time.Second)
	args := &WriteArgs{WriteRequest: structs.WriteRequest{Forwarded: true}}
	done, err := f.Forward("Test.Write", args, args, nil)
	if !done || !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("second hop exp: refused with no_leader got: done=%v %v", done, err)
	}
}

func TestForward_HoldsWhileNoLeaderThenForwards(t *testing.T) {
	addr, svc := mustServeLeader(t)
	ls := newFakeLeader()
	f := newTestForwarder(t, ls, 10*time.Second)
	result := make(chan error, 1)
	go func() {
		args := &WriteArgs{Value: "held"}
		var reply string
		_, err := f.Forward("Test.Write", args, args, &reply)
		result <- err
	}()
	// Nothing may reach the leader while there is none.
	select {
	case err := <-result:
		t.Fatalf("exp: held got: returned %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	ls.set(addr, false)
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("exp: forwarded after election got: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held request exp: forwarded once a leader appeared got: still held")
	}
	if svc.calls.Load() != 1 {
		t.Fatalf("leader calls exp: 1 got: %d", svc.calls.Load())
	}
}

func TestForward_NoLeaderWithinHoldFailsWithNoLeader(t *testing.T) {
	f := newTestForwarder(t, newFakeLeader(), 300*time.Millisecond)
	args := &WriteArgs{}
	done, err := f.Forward("Test.Write", args, args, nil)
	if !done || !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("exp: no_leader after hold got: done=%v %v", done, err)
	}
}

func TestForward_UnreachableLeaderIsRetriedAsNotSent(t *testing.T) {
	addr, svc := mustServeLeader(t)
	ls := newFakeLeader()
	// A dead address first (connection refused), then the real leader.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	ls.set(deadAddr, false)
	f := newTestForwarder(t, ls, 10*time.Second)
	go func() {
		time.Sleep(150 * time.Millisecond) // the election the caller rides through
		ls.set(addr, false)
	}()
	args := &WriteArgs{Value: "v"}
	var reply string
	if _, err := f.Forward("Test.Write", args, args, &reply); err != nil || reply != "leader:v" {
		t.Fatalf("exp: retried to the new leader got: %q %v", reply, err)
	}
	if svc.calls.Load() != 1 {
		t.Fatalf("leader calls exp: 1 got: %d", svc.calls.Load())
	}
}
