// Package harness runs in-process claimd clusters on real loopback TCP with
// real boltdb files, and a network layer that can cut any pair of servers
// in either direction and heal. Later chaos tests reuse it.
package harness

import (
	"context"
	"net"
	"os"
	"sync"
	"time"

	"github.com/claimd/claimd/rpc"
)

// Network routes the dials of named hosts and drops traffic between pairs
// on demand. A cut direction from→to behaves like a network that loses every
// packet from `from` to `to`: bytes written that way wait (as TCP would keep
// retransmitting) until the cut heals or the connection is closed; a new
// dial across a cut hangs until its deadline, like a lost SYN.
type Network struct {
	mu      sync.Mutex
	hosts   map[string]string // address → host name
	cuts    map[[2]string]bool
	changed chan struct{} // closed and replaced at every Cut/Heal
}

// NewNetwork makes a network with no cuts.
func NewNetwork() *Network {
	return &Network{hosts: map[string]string{}, cuts: map[[2]string]bool{}, changed: make(chan struct{})}
}

// AddHost names the host listening at addr.
func (n *Network) AddHost(name, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hosts[addr] = name
}

// Cut drops traffic from → to (one direction).
func (n *Network) Cut(from, to string) { n.set(true, [2]string{from, to}) }

// Partition drops traffic both ways between a and b.
func (n *Network) Partition(a, b string) { n.set(true, [2]string{a, b}, [2]string{b, a}) }

// Isolate cuts host off from every other known host, both ways.
func (n *Network) Isolate(host string) {
	n.mu.Lock()
	var pairs [][2]string
	for _, other := range n.hosts {
		if other != host {
			pairs = append(pairs, [2]string{host, other}, [2]string{other, host})
		}
	}
	n.mu.Unlock()
	n.set(true, pairs...)
}

// Heal removes every cut.
func (n *Network) Heal() {
	n.mu.Lock()
	n.cuts = map[[2]string]bool{}
	n.notifyLocked()
	n.mu.Unlock()
}

func (n *Network) set(cut bool, pairs ...[2]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range pairs {
		if cut {
			n.cuts[p] = true
		} else {
			delete(n.cuts, p)
		}
	}
	n.notifyLocked()
}

func (n *Network) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// isCut reports whether from→to is cut, and a channel closed at the next change.
func (n *Network) isCut(from, to string) (bool, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cuts[[2]string{from, to}], n.changed
}

func (n *Network) hostOf(addr string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[addr]
}

// waitOpen blocks while from→to is cut, until healed, done closes, or the
// deadline passes (zero deadline = none).
func (n *Network) waitOpen(from, to string, done <-chan struct{}, deadline time.Time) error {
	for {
		cut, changed := n.isCut(from, to)
		if !cut {
			return nil
		}
		var timer <-chan time.Time
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-changed:
		case <-done:
			return net.ErrClosed
		case <-timer:
			return os.ErrDeadlineExceeded
		}
	}
}

// Dialer returns the dialer host `from` uses for every outbound connection.
func (n *Network) Dialer(from string) rpc.Dialer {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		to := n.hostOf(addr)
		if to == "" {
			return rpc.DefaultDialer(ctx, addr)
		}
		dl, _ := ctx.Deadline()
		// A SYN or SYN-ACK lost either way fails the handshake.
		for _, p := range [][2]string{{from, to}, {to, from}} {
			if err := n.waitOpen(p[0], p[1], ctx.Done(), dl); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, err
			}
		}
		conn, err := rpc.DefaultDialer(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &link{Conn: conn, net: n, from: from, to: to, closed: make(chan struct{})}, nil
	}
}

// link is the dialling end of a connection between two hosts. Both
// directions are checked here: Write carries from→to, Read delivers to→from.
type link struct {
	net.Conn
	net      *Network
	from, to string

	mu            sync.Mutex
	readDeadline  time.Time
	pending       []byte // read while a cut began; delivered after it heals
	writeDeadline time.Time
	closeOnce     sync.Once
	closed        chan struct{}
}

func (l *link) Write(p []byte) (int, error) {
	l.mu.Lock()
	dl := l.writeDeadline
	l.mu.Unlock()
	if err := l.net.waitOpen(l.from, l.to, l.closed, dl); err != nil {
		return 0, err
	}
	return l.Conn.Write(p)
}

func (l *link) Read(p []byte) (int, error) {
	l.mu.Lock()
	dl := l.readDeadline
	l.mu.Unlock()
	if err := l.net.waitOpen(l.to, l.from, l.closed, dl); err != nil {
		return 0, err
	}
	l.mu.Lock()
	if len(l.pending) > 0 {
		n := copy(p, l.pending)
		l.pending = l.pending[n:]
		l.mu.Unlock()
		return n, nil
	}
	l.mu.Unlock()
	n, err := l.Conn.Read(p)
	if n > 0 {
		// The bytes may have arrived just as a cut began: hold them until
		// it heals, as a lost packet would be retransmitted. If the
		// deadline passes first, keep them for the next Read.
		if werr := l.net.waitOpen(l.to, l.from, l.closed, dl); werr != nil {
			l.mu.Lock()
			l.pending = append(l.pending, p[:n]...)
			l.mu.Unlock()
			return 0, werr
		}
	}
	return n, err
}

func (l *link) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Conn.Close()
}

func (l *link) SetDeadline(t time.Time) error {
	l.mu.Lock()
	l.readDeadline, l.writeDeadline = t, t
	l.mu.Unlock()
	return l.Conn.SetDeadline(t)
}

func (l *link) SetReadDeadline(t time.Time) error {
	l.mu.Lock()
	l.readDeadline = t
	l.mu.Unlock()
	return l.Conn.SetReadDeadline(t)
}

func (l *link) SetWriteDeadline(t time.Time) error {
	l.mu.Lock()
	l.writeDeadline = t
	l.mu.Unlock()
	return l.Conn.SetWriteDeadline(t)
}
