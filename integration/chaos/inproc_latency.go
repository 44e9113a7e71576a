package chaos

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Added latency for the in-process backend. Each end of a server↔server
// connection delays what it reads: a pump goroutine reads from the real
// connection, stamps each chunk with the time it may be delivered (now +
// latency, never earlier than the chunk before it, so the byte order is
// kept), and Read hands chunks out when they are due. Chunks are in flight
// together, so latency does not limit throughput. A connection starts with
// no pump and reads directly; its pump starts the first time a Read finds
// latency on, and stays (it owns the real reads from then on).

const (
	delayChunk = 32 << 10
	delayQueue = 64
)

type delayChunkT struct {
	data []byte
	err  error
	due  time.Time
}

type delayConn struct {
	net.Conn
	latency func() time.Duration

	readMu sync.Mutex // one Read at a time; guards ch, head and err
	pumped atomic.Bool
	ch     chan delayChunkT
	head   *delayChunkT // received, not yet (fully) delivered
	err    error

	mu           sync.Mutex
	readDeadline time.Time
	deadlineSet  chan struct{} // closed and replaced when the read deadline changes

	closeOnce sync.Once
	closed    chan struct{}
}

func newDelayConn(c net.Conn, latency func() time.Duration) *delayConn {
	return &delayConn{Conn: c, latency: latency, closed: make(chan struct{}), deadlineSet: make(chan struct{})}
}

func (c *delayConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if !c.pumped.Load() {
		if c.latency() <= 0 {
			return c.Conn.Read(p)
		}
		c.startPump()
	}
	for {
		if c.head == nil {
			if c.err != nil {
				return 0, c.err
			}
			select {
			case ch := <-c.ch:
				c.head = &ch
			default:
				if err := c.wait(nil); err != nil {
					return 0, err
				}
				continue
			}
		}
		if err := c.wait(c.head); err != nil {
			return 0, err
		}
		if len(c.head.data) > 0 {
			n := copy(p, c.head.data)
			c.head.data = c.head.data[n:]
			if len(c.head.data) == 0 && c.head.err == nil {
				c.head = nil
			}
			return n, nil
		}
		c.err = c.head.err
		c.head = nil
	}
}

// wait blocks until head is due (or, with no head, until a chunk arrives
// and becomes head), the read deadline passes, or the conn closes.
func (c *delayConn) wait(head *delayChunkT) error {
	for {
		c.mu.Lock()
		dl, changed := c.readDeadline, c.deadlineSet
		c.mu.Unlock()
		var dlC <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			dlC = t.C
		}
		var dueC <-chan time.Time
		var recv chan delayChunkT
		if head != nil {
			d := time.Until(head.due)
			if d <= 0 {
				return nil
			}
			t := time.NewTimer(d)
			defer t.Stop()
			dueC = t.C
		} else {
			recv = c.ch
		}
		select {
		case <-dueC:
			return nil
		case ch := <-recv:
			c.head = &ch
			return nil
		case <-dlC:
			return os.ErrDeadlineExceeded
		case <-changed:
		case <-c.closed:
			return net.ErrClosed
		}
	}
}

func (c *delayConn) startPump() {
	c.ch = make(chan delayChunkT, delayQueue)
	c.pumped.Store(true)
	// The pump reads continuously; deadlines are applied by Read.
	_ = c.Conn.SetReadDeadline(time.Time{})
	go func() {
		buf := make([]byte, delayChunk)
		var last time.Time
		for {
			n, err := c.Conn.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) && n == 0 {
				// A deadline set just as the pump started: the pump
				// never wants one.
				_ = c.Conn.SetReadDeadline(time.Time{})
				continue
			}
			due := time.Now().Add(c.latency())
			if due.Before(last) {
				due = last
			}
			last = due
			ch := delayChunkT{data: append([]byte(nil), buf[:n]...), err: err, due: due}
			select {
			case c.ch <- ch:
			case <-c.closed:
				return
			}
			if err != nil {
				return
			}
		}
	}()
}

func (c *delayConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	close(c.deadlineSet)
	c.deadlineSet = make(chan struct{})
	c.mu.Unlock()
	if c.pumped.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *delayConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *delayConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// delayListener delays reads of accepted connections that another server
// dialled (the dialling end registered the connection's address first).
type delayListener struct {
	net.Listener
	ip *inProcess
}

func (l *delayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	remote := c.RemoteAddr().String()
	var fromServer *bool
	var mu sync.Mutex
	return newDelayConn(c, func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if fromServer == nil {
			l.ip.mu.Lock()
			v := l.ip.serverConns[remote]
			l.ip.mu.Unlock()
			// Only decided once the dialler could have registered it:
			// before any byte arrived we cannot tell, so say no latency
			// and ask again next time.
			if !v {
				return 0
			}
			fromServer = &v
		}
		return l.ip.currentLatency()
	}), nil
}
