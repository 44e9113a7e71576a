package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	netrpc "net/rpc"
	"reflect"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/structs"
)

// ErrNotSent marks a call that failed before its request left this process
// (dial, session or stream failure). Such a call may be retried safely; a
// call that failed after sending may or may not have been applied.
var ErrNotSent = errors.New("request not sent")

// ErrTransport marks a call whose connection failed (as opposed to an error
// the remote handler returned). Every ErrNotSent error is also ErrTransport.
var ErrTransport = errors.New("transport failure")

// maxIdleStreams bounds the streams kept open per session for reuse.
// Opening a stream costs frames both ways, a goroutine and codec buffers at
// the server, and closing it more frames, so every call beyond the idle
// bound pays for a stream of its own. A follower forwards as many calls at
// once as it has callers: with 32 here, 64 callers through a follower
// opened and closed a stream for half their calls, 256 callers for seven
// in eight. An idle stream costs the server a parked goroutine and about
// 10 KB, so 512 per peer session is a few megabytes.
const maxIdleStreams = 512

// MuxClient makes RPC calls over one yamux session, one call per stream at a
// time, reusing idle streams. It is safe for concurrent use.
type MuxClient struct {
	session *yamux.Session
	// slots holds one token per open stream (in use or idle), at most
	// maxOpenStreams: past that a caller waits for a stream rather than
	// open one the server would refuse (MaxStreamsPerSession).
	slots chan struct{}
	// idleCh signals (one buffered) that a stream went back to the pool,
	// to a caller waiting for a slot.
	idleCh chan struct{}

	mu   sync.Mutex
	idle []*muxStream
}

// muxStream is one open stream with its net/rpc client, holding a slot
// until it is closed.
type muxStream struct {
	*netrpc.Client
	slots chan struct{}
	once  sync.Once
}

// Close closes the stream and gives its slot back.
func (s *muxStream) Close() error {
	err := s.Client.Close()
	s.once.Do(func() { <-s.slots })
	return err
}

func newMuxClient(s *yamux.Session) *MuxClient {
	return &MuxClient{session: s, slots: make(chan struct{}, maxOpenStreams), idleCh: make(chan struct{}, 1)}
}

// DialMux dials addr, writes ProtoMux and starts a yamux client session.
func DialMux(ctx context.Context, dial Dialer, addr string, logger hclog.Logger) (*MuxClient, error) {
	conn, err := DialProtocol(ctx, dial, addr, ProtoMux)
	if err != nil {
		return nil, notSent(err)
	}
	return NewMuxClient(conn, logger)
}

// NewMuxClient starts a yamux client session on an already-dialled conn
// (after the protocol byte).
func NewMuxClient(conn net.Conn, logger hclog.Logger) (*MuxClient, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	sess, err := yamux.Client(coalesceFrames(conn), YamuxConfig(logger))
	if err != nil {
		conn.Close()
		return nil, notSent(fmt.Errorf("yamux: %w", err))
	}
	return newMuxClient(sess), nil
}

// WrapSession makes a MuxClient over an existing session (for example a
// server calling down a client agent's session).
func WrapSession(s *yamux.Session) *MuxClient { return newMuxClient(s) }

// Session returns the underlying session.
func (m *MuxClient) Session() *yamux.Session { return m.session }

// IsClosed reports whether the session is gone.
func (m *MuxClient) IsClosed() bool { return m.session.IsClosed() }

// Close closes the session and every stream on it.
func (m *MuxClient) Close() error {
	m.mu.Lock()
	idle := m.idle
	m.idle = nil
	m.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	return m.session.Close()
}

func (m *MuxClient) acquire(ctx context.Context) (*muxStream, error) {
	for {
		m.mu.Lock()
		if n := len(m.idle); n > 0 {
			c := m.idle[n-1]
			m.idle = m.idle[:n-1]
			m.mu.Unlock()
			if n > 1 {
				// Another caller may be waiting for one of the rest.
				m.signalIdle()
			}
			return c, nil
		}
		m.mu.Unlock()
		select {
		case m.slots <- struct{}{}:
		case <-m.idleCh:
			continue // a stream went back to the pool: look again
		case <-ctx.Done():
			return nil, notSentError{coded: structs.NewError(structs.CodeTimeout,
				fmt.Sprintf("waiting for one of the session's %d streams: %v", maxOpenStreams, ctx.Err()))}
		case <-m.session.CloseChan():
			return nil, notSent(fmt.Errorf("%w: open stream: %v", ErrNotSent, yamux.ErrSessionShutdown))
		}
		stream, err := m.session.OpenStream()
		if err != nil {
			<-m.slots
			return nil, notSent(fmt.Errorf("%w: open stream: %v", ErrNotSent, err))
		}
		return &muxStream{Client: netrpc.NewClientWithCodec(NewClientCodec(stream)), slots: m.slots}, nil
	}
}

// signalIdle wakes a caller waiting for a stream (all maxOpenStreams are
// open): one went back to the pool. The signal is kept when nobody waits
// yet, so a caller that found the pool empty just before still sees it.
func (m *MuxClient) signalIdle() {
	select {
	case m.idleCh <- struct{}{}:
	default:
	}
}

func (m *MuxClient) release(c *muxStream) {
	m.mu.Lock()
	if len(m.idle) < maxIdleStreams && !m.session.IsClosed() {
		m.idle = append(m.idle, c)
		m.mu.Unlock()
		m.signalIdle()
		return
	}
	m.mu.Unlock()
	c.Close()
}

// Call invokes method and waits for the reply or the context. Errors the
// remote handler returned come back as coded errors (errors.Is works);
// transport errors are coded unavailable, and wrap ErrNotSent when the
// request never left.
func (m *MuxClient) Call(ctx context.Context, method string, args, reply any) error {
	c, err := m.acquire(ctx)
	if err != nil {
		return err
	}
	// Decode into a fresh value and copy it out only on success: after a
	// timeout the stream's reader may still fill the reply in, and the
	// caller must never see (or race with) that late write.
	fresh := freshReply(reply)
	call := c.Go(method, args, fresh, make(chan *netrpc.Call, 1))
	select {
	case <-call.Done:
	case <-ctx.Done():
		// The stream may still deliver a late reply: never reuse it.
		c.Close()
		return structs.NewError(structs.CodeTimeout, fmt.Sprintf("%s: %v", method, ctx.Err()))
	}
	var se netrpc.ServerError
	switch {
	case call.Error == nil:
		m.release(c)
		copyReply(reply, fresh)
		return nil
	case errors.As(call.Error, &se):
		if streamEnded(string(se)) {
			// The server refused the request itself (its size, the
			// read deadline, the budget) and closed the stream.
			c.Close()
		} else {
			m.release(c)
		}
		return structs.ParseError(call.Error)
	case sendFailed(call.Error) || errors.Is(call.Error, netrpc.ErrShutdown):
		// net/rpc hands back raw errors only from writing the request;
		// failures while waiting for the reply come as io.ErrUnexpectedEOF
		// (or ErrShutdown after a Close, which this client does only to a
		// stream no call is waiting on). ErrShutdown here therefore means
		// the stream had already died (an idle stream whose session the
		// peer closed) and net/rpc refused to write the request. Either
		// way the request never reached the server, so the call may be
		// retried elsewhere.
		c.Close()
		return notSent(fmt.Errorf("%s: %w", method, call.Error))
	default:
		c.Close()
		return transportError{coded: structs.NewError(structs.CodeUnavailable, fmt.Sprintf("%s: %v", method, call.Error))}
	}
}

// notSentError is an unavailable error that also matches ErrNotSent.
type notSentError struct{ coded *structs.CodedError }

func (e notSentError) Error() string   { return e.coded.Error() }
func (e notSentError) Unwrap() []error { return []error{e.coded, ErrNotSent, ErrTransport} }

// transportError is an unavailable error from a failed connection.
type transportError struct{ coded *structs.CodedError }

func (e transportError) Error() string   { return e.coded.Error() }
func (e transportError) Unwrap() []error { return []error{e.coded, ErrTransport} }

func notSent(err error) error {
	// A failed dial is unavailable already: kept as it is, not wrapped in
	// a second "unavailable: " (issue 30).
	var ce *structs.CodedError
	if errors.As(err, &ce) && ce == err && ce.Code == structs.CodeUnavailable {
		return notSentError{coded: ce}
	}
	return notSentError{coded: structs.NewError(structs.CodeUnavailable, err.Error())}
}

// freshReply returns a new zero value of what reply points to (reply itself
// when it is not a non-nil pointer).
func freshReply(reply any) any {
	v := reflect.ValueOf(reply)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return reply
	}
	return reflect.New(v.Type().Elem()).Interface()
}

// copyReply stores *fresh into *reply.
func copyReply(reply, fresh any) {
	if reply == fresh {
		return
	}
	reflect.ValueOf(reply).Elem().Set(reflect.ValueOf(fresh).Elem())
}

// sendFailed reports whether err came from writing the request on a dead
// stream or connection, before the request could have reached the server.
// yamux.ErrSessionShutdown is not such an error: a stream write hands its
// frame to the session's send loop and then waits for either the write's
// result or the session's shutdown, and when the frame was written just
// before the session closed (the server applied the request and stopped)
// yamux may report the shutdown. Taking that for "not sent" retried
// requests the server had applied.
func sendFailed(err error) bool {
	return errors.Is(err, yamux.ErrStreamClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}
