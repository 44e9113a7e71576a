package rpc

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// yamux v0.1.2 spins when a session shuts down under a stream that is
// waiting in Read (or in Write for window): its wait selects on the
// session's closed shutdown channel and loops back, with no yield, until
// Session.Close reaches the stream's forceClose. Close first waits for
// the receive loop to end, so with many streams waiting the spinners take
// every CPU from the goroutines that would end them, and a session with
// a thousand idle streams kept a server's cores busy for seconds to
// minutes (issue 38: the leader lost its leadership, and stayed
// unreachable for minutes after an idle-stream flood left; upstream:
// hashicorp/yamux#127, #176, open).
//
// streamGuard keeps a server's goroutines out of that loop. It knows the
// streams of one session that goroutines may be reading, and when the
// session ends it wakes each of them with a read and write deadline in
// the past: a woken wait returns a timeout within an iteration or two
// instead of spinning, and the reader sees io.EOF. It runs from the
// connection's Close (yamux closes the connection right after closing
// its shutdown channel, in the same goroutine) and from its Read failing
// (the peer left), so it runs before the spinners are scheduled.
type streamGuard struct {
	closing atomic.Bool
	mu      sync.Mutex
	streams map[*guardedStream]struct{}
}

func newStreamGuard() *streamGuard {
	return &streamGuard{streams: map[*guardedStream]struct{}{}}
}

// past is a deadline that has passed.
var past = time.Unix(1, 0)

// wakeAll marks the session as ending and wakes every guarded stream.
func (g *streamGuard) wakeAll() {
	if g.closing.Swap(true) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := range g.streams {
		_ = s.Stream.SetDeadline(past)
	}
}

// guard wraps a stream of the session; release it when no goroutine
// will read or write it any more.
func (g *streamGuard) guard(s *yamux.Stream) *guardedStream {
	gs := &guardedStream{Stream: s, g: g}
	g.mu.Lock()
	g.streams[gs] = struct{}{}
	g.mu.Unlock()
	if g.closing.Load() {
		_ = s.SetDeadline(past)
	}
	return gs
}

func (g *streamGuard) release(s *guardedStream) {
	g.mu.Lock()
	delete(g.streams, s)
	g.mu.Unlock()
}

// guardedStream is a yamux stream whose session's end wakes its reader.
type guardedStream struct {
	*yamux.Stream
	g *streamGuard
}

func (s *guardedStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	if err != nil && s.g.closing.Load() {
		return n, io.EOF
	}
	return n, err
}

func (s *guardedStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	if err != nil && s.g.closing.Load() {
		return n, yamux.ErrSessionShutdown
	}
	return n, err
}

// Deadlines set once the session ends would undo the wake-up.
func (s *guardedStream) SetReadDeadline(t time.Time) error {
	if s.g.closing.Load() {
		return nil
	}
	return s.Stream.SetReadDeadline(t)
}

func (s *guardedStream) SetWriteDeadline(t time.Time) error {
	if s.g.closing.Load() {
		return nil
	}
	return s.Stream.SetWriteDeadline(t)
}

func (s *guardedStream) SetDeadline(t time.Time) error {
	if s.g.closing.Load() {
		return nil
	}
	return s.Stream.SetDeadline(t)
}

// guardedConn is a session's connection that wakes the session's streams
// when it closes or fails, before yamux's receive loop sees the failure.
type guardedConn struct {
	net.Conn
	g *streamGuard
}

func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.g.wakeAll()
	}
	return n, err
}

func (c *guardedConn) Close() error {
	c.g.wakeAll()
	return c.Conn.Close()
}

// guards maps each server session made by NewYamuxServer to its guard.
var guards sync.Map // *yamux.Session -> *streamGuard

func guardOf(sess *yamux.Session) *streamGuard {
	if g, ok := guards.Load(sess); ok {
		return g.(*streamGuard)
	}
	return nil
}
