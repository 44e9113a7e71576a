package netlab

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	mrand "math/rand/v2"
	"net"
	"testing"
	"time"
)

// mustNewEchoProxy starts a loopback echo server and a proxy in front of it.
func mustNewEchoProxy(t *testing.T, delay, jitter time.Duration) *DelayProxy {
	t.Helper()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, echo)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewDelayProxy(ln, nil, echo.Addr().String(), delay, jitter)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func mustDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestDelayProxy_AddsTheDelayInEachDirection(t *testing.T) {
	t.Parallel()
	const delay = 40 * time.Millisecond
	p := mustNewEchoProxy(t, delay, 0)
	c := mustDial(t, p.Addr())
	for i := range 3 {
		start := time.Now()
		if err := roundTrip(c, "x"); err != nil {
			t.Fatal(err)
		}
		// There and back: the delay twice.
		if rtt := time.Since(start); rtt < 2*delay {
			t.Fatalf("round trip %d: exp: >= %s got: %s", i, 2*delay, rtt)
		}
	}

	// Latency off without breaking the connection.
	p.SetDelay(0, 0)
	fastest := time.Hour
	for range 5 {
		start := time.Now()
		if err := roundTrip(c, "y"); err != nil {
			t.Fatal(err)
		}
		fastest = min(fastest, time.Since(start))
	}
	if fastest >= 2*delay {
		t.Fatalf("after SetDelay(0, 0): exp: a round trip < %s got: fastest %s", 2*delay, fastest)
	}
}

func TestDelayProxy_PreservesTheStreamUnderJitter(t *testing.T) {
	t.Parallel()
	p := mustNewEchoProxy(t, time.Millisecond, 5*time.Millisecond)
	c := mustDial(t, p.Addr())
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))

	sent := make([]byte, 8<<20)
	_, _ = rand.Read(sent)
	writeErr := make(chan error, 1)
	go func() {
		// Writes of random sizes, then a half close that must travel
		// through the proxy to the echo server and back as EOF.
		for rest := sent; len(rest) > 0; {
			n := min(len(rest), 1+mrand.IntN(100<<10))
			if _, err := c.Write(rest[:n]); err != nil {
				writeErr <- err
				return
			}
			rest = rest[n:]
		}
		writeErr <- c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, sent) {
		i := 0
		for i < min(len(got), len(sent)) && got[i] == sent[i] {
			i++
		}
		t.Fatalf("exp: %d bytes back unchanged got: %d bytes, first difference at %d", len(sent), len(got), i)
	}
}

func TestDelayProxy_BuffersABoundedAmount(t *testing.T) {
	t.Parallel()
	// A target that accepts and never reads: what a client can write is
	// then bounded by socket buffers plus the proxy's own queue.
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 1)
	go func() {
		c, err := sink.Accept()
		if err == nil {
			held <- c
		}
	}()
	t.Cleanup(func() {
		_ = sink.Close()
		select {
		case c := <-held:
			_ = c.Close()
		default:
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewDelayProxy(ln, nil, sink.Addr().String(), time.Millisecond, 0)
	t.Cleanup(func() { _ = p.Close() })
	c := mustDial(t, p.Addr())

	const limit = 64 << 20
	block := make([]byte, 64<<10)
	total := 0
	for total < limit {
		_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Write(block)
		total += n
		if isTimeout(err) {
			t.Logf("writes blocked after %d KiB", total>>10)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("exp: writes block when the target does not read got: %d MiB accepted", total>>20)
}

func TestDelayProxy_CloseEndsEveryConnection(t *testing.T) {
	t.Parallel()
	p := mustNewEchoProxy(t, 5*time.Millisecond, 0)
	c := mustDial(t, p.Addr())
	if err := roundTrip(c, "alive"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("exp: connection closed by Close got: %v", err)
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c2.Close()
		t.Fatal("exp: no new connections after Close got: connected")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestDelayProxy_TargetDownClosesTheClient(t *testing.T) {
	t.Parallel()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := dead.Addr().String()
	dead.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewDelayProxy(ln, nil, target, 0, 0)
	t.Cleanup(func() { _ = p.Close() })
	c := mustDial(t, p.Addr())
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("exp: EOF got: %v", err)
	}
}

func TestDelayProxy_BetweenLabHosts(t *testing.T) {
	t.Parallel()
	lab := New(t, "a", "b", "c")
	echo, err := lab.Listen("a", net.JoinHostPort(lab.Addr("a"), "7000"))
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, echo)
	// The proxy lives on b: it listens and dials from b's namespace, so
	// c → b → a is the path, with latency on the b legs.
	ln, err := lab.Listen("b", net.JoinHostPort(lab.Addr("b"), "0"))
	if err != nil {
		t.Fatal(err)
	}
	const delay = 30 * time.Millisecond
	p := NewDelayProxy(ln, lab.Dialer("b"), echo.Addr().String(), delay, 0)
	t.Cleanup(func() { _ = p.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := lab.Dialer("c")(ctx, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if err := roundTrip(c, "via b"); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*delay {
		t.Fatalf("exp: round trip >= %s got: %s", 2*delay, rtt)
	}

	// The proxy is subject to the lab's faults like any process on b.
	if err := lab.Partition("b", "a"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 4)); !isTimeout(err) {
		t.Fatalf("exp: no echo across the partition got: %v", err)
	}
	if err := lab.Heal(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "lost" {
		t.Fatalf("exp: the bytes arrive once healed (TCP retransmits) got: %q, %v", got, err)
	}
}
