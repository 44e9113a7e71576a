package rpc

import (
	"fmt"
	"net"
	netrpc "net/rpc"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testutil"
)

// processCPU is this process's user and system CPU time.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Issue 38: when a session with many idle streams ends (its peer leaves),
// the goroutines reading them return at once. yamux v0.1.2 spins each of
// them on the closed session until Session.Close reaches it, which with
// a thousand of them took seconds of CPU from everything else (the
// leader lost its leadership); the stream guard wakes them first.
func TestServeStreams_SessionEndWakesIdleReadersWithoutSpinning(t *testing.T) {
	const streams = 1000
	rs := netrpc.NewServer()
	if err := rs.RegisterName("Echo", &echo{}); err != nil {
		t.Fatal(err)
	}
	var serving atomic.Int64
	addr := testutil.ServeLoopback(t, func(c net.Conn) {
		if _, ok := testutil.ReadProtocolByte(c); !ok {
			return
		}
		sess, err := NewYamuxServer(c, nil)
		if err != nil {
			return
		}
		lim := RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute}
		ServeStreams(sess, StreamLimits{PerSession: 2 * streams, Refusal: lim}, func(s net.Conn) {
			serving.Add(1)
			defer serving.Add(-1)
			rs.ServeCodec(NewLimitedServerCodec(s, lim))
		}, func(string) {})
	})
	sess := rawSession(t, addr)
	for range streams {
		if _, err := sess.OpenStream(); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := serving.Load(); n != streams {
			return fmt.Errorf("idle streams served exp: %d got: %d", streams, n)
		}
		return nil
	})
	cpu, began := processCPU(t), time.Now()
	sess.Close() // the peer leaves
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := serving.Load(); n != 0 {
			return fmt.Errorf("streams still served after the session ended exp: 0 got: %d", n)
		}
		return nil
	})
	used, took := processCPU(t)-cpu, time.Since(began)
	t.Logf("%d idle streams ended in %v, %v of CPU", streams, took, used)
	if used > time.Second {
		t.Fatalf("CPU to end a session of %d idle streams exp: < 1s got: %v (in %v)", streams, used, took)
	}
}

// A session that keeps maxRefusedPerSession refused streams open and
// opens one more is closed, even when its peer is far from any other
// limit: answering refusals one by one is work the peer could make the
// server do for ever.
func TestServeStreams_SessionClosedPastRefusedStreamsKeptOpen(t *testing.T) {
	// The peer's cap is what refuses; its other limits are far.
	const peerStreams = 100
	peers := NewPeersWith(NewBudget("server", 1<<20, nil), 10, peerStreams, 1<<20)
	ls := serveLimitedPeers(t, 1000, peers, func(pe *Peer) RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: NewBudget("session", 1<<20, pe.Budget())}
	})
	sess := rawSession(t, ls.addr)
	for i := range peerStreams {
		holdBlocked(t, sess, uint64(i))
	}
	testutil.WaitFor(t, 5*time.Second, arrivedIs(ls, peerStreams))
	for range maxRefusedPerSession {
		if _, err := sess.OpenStream(); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := ls.refusals.Load(); n != maxRefusedPerSession {
			return fmt.Errorf("streams refused exp: %d got: %d", maxRefusedPerSession, n)
		}
		return nil
	})
	if sess.IsClosed() {
		t.Fatalf("session with %d refused streams open exp: open got: closed", maxRefusedPerSession)
	}
	_, _ = sess.OpenStream()
	select {
	case <-sess.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatalf("session exp: closed once it keeps %d refused streams and opens one more got: open", maxRefusedPerSession)
	}
}
