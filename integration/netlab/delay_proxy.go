package netlab

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/rpc"
)

const (
	// proxyChunk is the most one read takes from a connection; each chunk
	// is delayed as a unit.
	proxyChunk = 32 << 10
	// proxyQueue is how many chunks may wait out their delay per direction.
	// With proxyChunk it bounds the proxy's buffer at 512 KiB per direction
	// per connection; a full queue stops reading, and TCP flow control then
	// pushes back on the sender, as a slow link would.
	proxyQueue = 16
	// proxyDialTimeout bounds the dial to the target for each accepted
	// connection.
	proxyDialTimeout = 10 * time.Second
)

// DelayProxy is a TCP proxy that adds latency: every chunk of bytes it reads
// from one side is written to the other side a delay (plus a random jitter)
// after it was read, in both directions. Chunks of one direction leave in
// the order they were read, whatever the jitter, so the byte stream is
// exactly the one sent; a half close (FIN) is forwarded after the same
// delay. Latency is added without limiting throughput: chunks are in flight
// concurrently, as on a long link.
//
// It exists because the kernel on the project's machines has no netem. It
// runs wherever its listener and dialer put it: on loopback with net.Listen
// and a nil dialer, or between lab hosts with Lab.Listen and Lab.Dialer.
type DelayProxy struct {
	ln     net.Listener
	dial   rpc.Dialer
	target string
	delay  atomic.Int64 // time.Duration
	jitter atomic.Int64 // time.Duration

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loop and every connection handler

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both sides of every live session
	closed bool
}

// NewDelayProxy serves connections accepted on ln by dialling target with
// dial (nil: rpc.DefaultDialer) and forwarding both ways with the given
// delay and jitter (each chunk waits delay plus a uniform random duration in
// [0, jitter]). The proxy owns ln and closes it in Close.
func NewDelayProxy(ln net.Listener, dial rpc.Dialer, target string, delay, jitter time.Duration) *DelayProxy {
	if dial == nil {
		dial = rpc.DefaultDialer
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &DelayProxy{ln: ln, dial: dial, target: target, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	p.SetDelay(delay, jitter)
	p.wg.Add(1)
	go p.serve()
	return p
}

// Addr is the address clients connect to.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the delay and jitter for chunks read from now on (chunks
// already waiting keep their time). SetDelay(0, 0) makes the proxy a plain
// relay, so a nemesis can switch latency on and off without breaking
// connections. Negative values count as zero.
func (p *DelayProxy) SetDelay(delay, jitter time.Duration) {
	p.delay.Store(int64(max(delay, 0)))
	p.jitter.Store(int64(max(jitter, 0)))
}

// Close stops accepting, closes every proxied connection (both sides, so
// both peers see the link die) and waits until all the proxy's goroutines
// have returned.
func (p *DelayProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *DelayProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed, or a broken listener: no more connections either way
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers a connection so Close can close it; false once closed,
// and the caller must then close it itself.
func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *DelayProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *DelayProxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	ctx, cancel := context.WithTimeout(p.ctx, proxyDialTimeout)
	server, err := p.dial(ctx, p.target)
	cancel()
	if err != nil {
		return // the client sees its connection close, as if the target refused
	}
	defer server.Close()
	if !p.track(server) {
		return
	}
	defer p.untrack(server)

	s := &session{p: p, stop: make(chan struct{}), conns: [2]net.Conn{client, server}}
	var wg sync.WaitGroup
	s.pipe(&wg, server, client)
	s.pipe(&wg, client, server)
	wg.Wait()
}

// session is one proxied connection: two pipes that stop together.
type session struct {
	p     *DelayProxy
	stop  chan struct{}
	once  sync.Once
	conns [2]net.Conn
}

// abort ends the session at once (a read or write failed, as when a link
// resets): both connections close, which unblocks every goroutine of both
// pipes.
func (s *session) abort() {
	s.once.Do(func() {
		close(s.stop)
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
}

type chunk struct {
	data []byte // nil with eof
	eof  bool
	due  time.Time
}

// pipe forwards src → dst: a reader stamps each chunk with the time it may
// leave, a writer holds it until then. The queue between them is what lets
// many chunks be in flight at once.
func (s *session) pipe(wg *sync.WaitGroup, dst, src net.Conn) {
	q := make(chan chunk, proxyQueue)
	wg.Go(func() { s.read(src, q) })
	wg.Go(func() { s.write(dst, q) })
}

func (s *session) read(src net.Conn, q chan<- chunk) {
	defer close(q)
	var last time.Time
	buf := make([]byte, proxyChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			// Copy: buf is reused while this chunk waits in the queue.
			c := chunk{data: append([]byte(nil), buf[:n]...), due: s.p.due(&last)}
			select {
			case q <- c:
			case <-s.stop:
				return
			}
		}
		if errors.Is(err, io.EOF) {
			select {
			case q <- chunk{eof: true, due: s.p.due(&last)}:
			case <-s.stop:
			}
			return
		}
		if err != nil {
			s.abort()
			return
		}
	}
}

func (s *session) write(dst net.Conn, q <-chan chunk) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-s.stop:
				return
			}
		}
		if c.eof {
			// Pass the half close on; the other direction may still carry
			// data. A connection type without half close ends the session.
			if cw, ok := dst.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
				s.abort()
			}
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			s.abort()
			return
		}
	}
}

// due is when a chunk read now may leave. It never precedes the previous
// chunk's time (last), so jitter cannot reorder a stream.
func (p *DelayProxy) due(last *time.Time) time.Time {
	d := time.Duration(p.delay.Load())
	if j := p.jitter.Load(); j > 0 {
		d += time.Duration(rand.Int64N(j + 1))
	}
	t := time.Now().Add(d)
	if t.Before(*last) {
		t = *last
	}
	*last = t
	return t
}
