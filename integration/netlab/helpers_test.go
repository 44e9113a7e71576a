package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func requireLab(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err.Error())
	}
}

// serveEcho echoes every connection accepted on ln, forwarding the client's
// half close, until the test ends.
func serveEcho(t testing.TB, ln net.Listener) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// roundTrip writes msg and reads it back within 5 s.
func roundTrip(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, []byte(msg)) {
		return fmt.Errorf("exp: %q got: %q", msg, got)
	}
	return nil
}

// dial connects from host to addr through the lab within timeout.
func dial(l *Lab, from, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.Dialer(from)(ctx, addr)
}

const probePort = "9000"

// probes has one UDP socket per host, bound to the host's lab address. UDP
// tells the two directions of a link apart, which TCP cannot (a connection
// needs packets both ways).
type probes struct {
	t     testing.TB
	lab   *Lab
	socks map[string]net.PacketConn
	seq   int
}

func newProbes(t testing.TB, l *Lab) *probes {
	t.Helper()
	p := &probes{t: t, lab: l, socks: map[string]net.PacketConn{}}
	for _, h := range l.Hosts() {
		pc, err := l.listenPacket(h, l.Addr(h)+":"+probePort)
		if err != nil {
			t.Fatalf("udp socket in %s: %v", h, err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		p.socks[h] = pc
	}
	return p
}

func (p *probes) token(from, to string) string {
	p.seq++
	return fmt.Sprintf("%s>%s#%d", from, to, p.seq)
}

func (p *probes) send(from, to, token string) error {
	dst, err := net.ResolveUDPAddr("udp", p.lab.Addr(to)+":"+probePort)
	if err != nil {
		return err
	}
	_, err = p.socks[from].WriteTo([]byte(token), dst)
	return err
}

// received drains to's socket (waiting at most wait for the first
// datagram) and reports whether token was among what arrived.
func (p *probes) received(to, token string, wait time.Duration) (bool, error) {
	pc := p.socks[to]
	buf := make([]byte, 256)
	found := false
	for i := 0; i < 1000; i++ {
		_ = pc.SetReadDeadline(time.Now().Add(wait))
		n, _, err := pc.ReadFrom(buf)
		if isTimeout(err) {
			return found, nil
		}
		if err != nil {
			return found, err
		}
		if string(buf[:n]) == token {
			found = true
		}
		wait = 5 * time.Millisecond
	}
	return found, fmt.Errorf("more than 1000 datagrams queued at %s", to)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// reachable proves packets from → to arrive: it sends until one does.
func (p *probes) reachable(from, to string) error {
	tok := p.token(from, to)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := p.send(from, to, tok); err != nil {
			return fmt.Errorf("send %s: %w", tok, err)
		}
		ok, err := p.received(to, tok, 50*time.Millisecond)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%s→%s: exp: datagram delivered got: none in 5s", from, to)
}

// blocked proves packets from → to are dropped without waiting for an
// absence: the datagram is sent, to's drop counter is polled until it
// counts it, and then it must not be in to's socket.
func (p *probes) blocked(from, to string) error {
	before, err := p.lab.Dropped(to)
	if err != nil {
		return err
	}
	tok := p.token(from, to)
	if err := p.send(from, to, tok); err != nil {
		return fmt.Errorf("send %s: %w", tok, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := p.lab.Dropped(to)
		if err != nil {
			return err
		}
		if n > before {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s→%s: exp: datagram dropped got: drop counter still %d after 5s", from, to, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := p.received(to, tok, time.Millisecond)
	if err != nil {
		return err
	}
	if got {
		return fmt.Errorf("%s→%s: exp: datagram dropped got: delivered", from, to)
	}
	return nil
}

// expect checks every direction between the lab's hosts: those listed in
// cut must be blocked, all others reachable.
func (p *probes) expect(cut ...string) {
	p.t.Helper()
	want := map[string]bool{}
	for _, c := range cut {
		want[c] = true
	}
	var errs []string
	hosts := p.lab.Hosts()
	for _, from := range hosts {
		for _, to := range hosts {
			if from == to {
				continue
			}
			var err error
			if want[from+">"+to] {
				err = p.blocked(from, to)
			} else {
				err = p.reachable(from, to)
			}
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		p.t.Fatalf("connectivity (cut: %v):\n%s", cut, strings.Join(errs, "\n"))
	}
}
