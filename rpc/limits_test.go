package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	netrpc "net/rpc"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// blocker holds each Wait call until released.
type blocker struct {
	arrived atomic.Int64
	release chan struct{}
	once    sync.Once
}

func (b *blocker) releaseAll() { b.once.Do(func() { close(b.release) }) }

func (b *blocker) Wait(args *EchoArgs, reply *string) error {
	b.arrived.Add(1)
	<-b.release
	*reply = args.Payload
	return nil
}

// limitedServer serves Echo and Block on a loopback listener: ProtoMux
// connections through ServeStreams, ProtoRPC connections on one codec,
// every codec under the limits made by limits (one call per session or
// connection, so that each gets its own session budget).
type limitedServer struct {
	addr     string
	echo     *echo
	block    *blocker
	refusals atomic.Int64 // streams refused by ServeStreams
	refused  atomic.Int64 // requests refused by a budget or the deadline
	// sessionsRefused: connections refused by the per-peer session cap.
	sessionsRefused atomic.Int64
}

func serveLimited(t *testing.T, maxStreams int, limits func() RequestLimits) *limitedServer {
	t.Helper()
	return serveLimitedPeers(t, maxStreams, nil, func(*Peer) RequestLimits { return limits() })
}

// serveLimitedPeers is serveLimited with per-peer caps (peers nil: none):
// every connection is a session of its peer (its remote IP), and limits
// makes its limits knowing its peer.
func serveLimitedPeers(t *testing.T, maxStreams int, peers *Peers, limits func(*Peer) RequestLimits) *limitedServer {
	t.Helper()
	ls := &limitedServer{echo: &echo{}, block: &blocker{release: make(chan struct{})}}
	t.Cleanup(ls.block.releaseAll)
	rs := netrpc.NewServer()
	if err := rs.RegisterName("Echo", ls.echo); err != nil {
		t.Fatal(err)
	}
	if err := rs.RegisterName("Block", ls.block); err != nil {
		t.Fatal(err)
	}
	withCount := func(pe *Peer) RequestLimits {
		lim := limits(pe)
		lim.Refused = func(*structs.CodedError) { ls.refused.Add(1) }
		return lim
	}
	ls.addr = testutil.ServeLoopback(t, func(c net.Conn) {
		p, ok := testutil.ReadProtocolByte(c)
		if !ok {
			return
		}
		var pe *Peer
		if peers != nil {
			var err error
			pe, err = peers.Open(PeerKey(c.RemoteAddr().String(), ""))
			if err != nil {
				ls.sessionsRefused.Add(1)
				if Protocol(p) == ProtoMux {
					if sess, err2 := newTestYamuxServer(c); err2 == nil {
						RefuseSession(sess, RequestLimits{}, err.Error())
					}
				}
				c.Close()
				return
			}
			defer pe.Close()
		}
		lim := withCount(pe)
		switch Protocol(p) {
		case ProtoRPC:
			rs.ServeCodec(NewLimitedServerCodec(c, lim))
		case ProtoMux:
			sess, err := newTestYamuxServer(c)
			if err != nil {
				return
			}
			defer sess.Close()
			ServeStreams(sess, StreamLimits{PerSession: maxStreams, Peer: pe, Refusal: lim}, func(s net.Conn) {
				rs.ServeCodec(NewLimitedServerCodec(s, lim))
			}, func(string) { ls.refusals.Add(1) })
		default:
			c.Close()
		}
	})
	return ls
}

// rawSession is a yamux client session to addr, for writing requests byte
// by byte.
func rawSession(t *testing.T, addr string) *yamux.Session {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{byte(ProtoMux)}); err != nil {
		t.Fatal(err)
	}
	sess, err := yamux.Client(c, YamuxConfig(hclog.NewNullLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// echoStart is the header of a method call and the start of its body, an
// EchoArgs whose Payload declares n bytes that the caller sends next.
func echoStart(t *testing.T, method string, n int) []byte {
	t.Helper()
	b := mustEncode(t, &netrpc.Request{ServiceMethod: method, Seq: 7})
	b = append(b, 0x81, 0xa7)
	b = append(b, "Payload"...)
	b = append(b, 0xdb, 0, 0, 0, 0) // str32
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(n))
	return b
}

func mustWrite(t *testing.T, w io.Writer, b []byte) {
	t.Helper()
	if _, err := w.Write(b); err != nil {
		t.Fatalf("write %d bytes: %v", len(b), err)
	}
}

// readReply reads one response (header and a string body) from r.
func readReply(r io.Reader) (netrpc.Response, string, error) {
	dec := codec.NewDecoder(r, structs.MsgpackHandle)
	var resp netrpc.Response
	if err := dec.Decode(&resp); err != nil {
		return resp, "", err
	}
	var body string
	if resp.Error != "" {
		var ignored any
		return resp, "", dec.Decode(&ignored)
	}
	return resp, body, dec.Decode(&body)
}

// used reports a budget's charge as an error until it is exp.
func usedIs(b *Budget, exp int64) func() error {
	return func() error {
		if got := b.Used(); got != exp {
			return fmt.Errorf("%s budget exp: %d bytes charged got: %d", b.Name(), exp, got)
		}
		return nil
	}
}

// A request's buffers are charged as they fill (the read buffer and the
// request buffer's whole capacity, to the session's budget and the
// server's) and released when the request has been read.
func TestBudget_ChargedAsReadAndReleasedOnCompletion(t *testing.T) {
	server := NewBudget("server", 1<<20, nil)
	session := NewBudget("session", 512<<10, server)
	ls := serveLimited(t, 16, func() RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: session}
	})
	s, err := rawSession(t, ls.addr).OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	const payload = 200 << 10
	mustWrite(t, s, echoStart(t, "Echo.Echo", payload))
	mustWrite(t, s, make([]byte, 100<<10))
	// 100 KiB and the header fit in a 128 KiB buffer.
	testutil.WaitFor(t, 5*time.Second, usedIs(session, 128<<10+readBufferBytes))
	if got := server.Used(); got != 128<<10+readBufferBytes {
		t.Fatalf("server budget exp: %d got: %d", 128<<10+readBufferBytes, got)
	}
	mustWrite(t, s, make([]byte, payload-100<<10))
	resp, body, err := readReply(s)
	if err != nil || resp.Error != "" || len(body) != payload {
		t.Fatalf("call exp: echoed %d bytes got: %d %q %v", payload, len(body), resp.Error, err)
	}
	testutil.WaitFor(t, 5*time.Second, usedIs(session, 0))
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 0))
}

// A request that fails (the peer leaves halfway) gives its charge back.
func TestBudget_ReleasedWhenTheRequestFails(t *testing.T) {
	server := NewBudget("server", 1<<20, nil)
	session := NewBudget("session", 512<<10, server)
	ls := serveLimited(t, 16, func() RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: session}
	})
	sess := rawSession(t, ls.addr)
	s, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, echoStart(t, "Echo.Echo", 300<<10))
	mustWrite(t, s, make([]byte, 100<<10))
	testutil.WaitFor(t, 5*time.Second, usedIs(session, 128<<10+readBufferBytes))
	sess.Close()
	testutil.WaitFor(t, 5*time.Second, usedIs(session, 0))
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 0))
	if n := ls.echo.calls.Load(); n != 0 {
		t.Fatalf("handler calls exp: 0 got: %d", n)
	}
}

// Past a budget a request is refused at once with an unavailable error
// naming the budget that is full, its stream is closed, and what the
// other requests hold is untouched. A small call fits in what is left and
// is served.
func TestBudget_RefusedPastTheCap(t *testing.T) {
	server := NewBudget("server", 96<<10, nil)
	ls := serveLimited(t, 16, func() RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: NewBudget("session", 100<<10, server)}
	})
	sess1, sess2 := rawSession(t, ls.addr), rawSession(t, ls.addr)

	// Session 1 holds a request in a 64 KiB buffer (60 KiB charged), where
	// all of it will fit.
	held, err := sess1.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, held, echoStart(t, "Echo.Echo", 50<<10))
	mustWrite(t, held, make([]byte, 40<<10))
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 64<<10+readBufferBytes))

	refusal := func(sess *yamux.Session, limit string) {
		t.Helper()
		s, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		// 40 KiB need a 64 KiB buffer: 60 KiB more.
		mustWrite(t, s, echoStart(t, "Echo.Echo", 50<<10))
		_, _ = s.Write(make([]byte, 40<<10)) // the server may close the stream before all of it
		resp, _, err := readReply(s)
		if err != nil {
			t.Fatalf("refusal exp: an answer got: %v", err)
		}
		perr := structs.ParseError(netrpc.ServerError(resp.Error))
		if !errors.Is(perr, structs.ErrUnavailable) || !strings.Contains(resp.Error, limit) || !streamEnded(resp.Error) {
			t.Fatalf("refusal exp: unavailable naming %s, stream closed got: %q", limit, resp.Error)
		}
		// The stream is closed after the answer.
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := io.Copy(io.Discard, s); err != nil {
			t.Fatalf("refused stream exp: closed (EOF) got: %d more bytes, %v", n, err)
		}
	}
	// A second large request on session 1 goes past the session's 100 KiB.
	refusal(sess1, "rpc.SessionBudgetBytes")
	// On session 2 it fits the session's budget but not the server's.
	refusal(sess2, "rpc.ServerBudgetBytes")
	if n := ls.refused.Load(); n != 2 {
		t.Fatalf("refusals reported exp: 2 got: %d", n)
	}
	// The held request kept its charge and completes.
	if got := server.Used(); got != 64<<10+readBufferBytes {
		t.Fatalf("server budget after the refusals exp: %d got: %d", 64<<10+readBufferBytes, got)
	}
	// A small call is served while the budget is taken.
	mc := WrapSession(sess2)
	var out string
	if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "small"}, &out); err != nil || out != "small" {
		t.Fatalf("small call exp: small got: %q %v", out, err)
	}
	mustWrite(t, held, make([]byte, 10<<10))
	if resp, body, err := readReply(held); err != nil || resp.Error != "" || len(body) != 50<<10 {
		t.Fatalf("held call exp: echoed got: %d %q %v", len(body), resp.Error, err)
	}
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 0))
}

// A request that declares a large value and sends little of it costs what
// arrived, not what it declared: its read buffer and a small request
// buffer, both charged.
func TestBudget_DeclaredLengthCostsOnlyWhatArrives(t *testing.T) {
	server := NewBudget("server", MaxRequestBytes, nil)
	ls := serveLimited(t, 16, func() RequestLimits {
		return RequestLimits{MaxBytes: MaxRequestBytes, ReadTimeout: time.Minute, Budget: NewBudget("session", MaxRequestBytes, server)}
	})
	sess := rawSession(t, ls.addr)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const streams = 8
	for range streams {
		s, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, append(echoStart(t, "Echo.Echo", MaxRequestBytes-1024), "ten bytes!"...))
	}
	// Every request has started and is held, charged for its read buffer
	// and a request buffer of the least size.
	testutil.WaitFor(t, 5*time.Second, usedIs(server, streams*(readBufferBytes+minFrameBuffer)))
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated for %d requests declaring %d bytes and sending 10 exp: < 1 MiB got: %d", streams, MaxRequestBytes, grew)
	}
}

// Issue 38: small unfinished requests are charged from their first byte,
// so many of them fill a budget like one large one: past it the next is
// refused with an unavailable error naming the budget. Before, the first
// 4 KiB of every request were free and 77,000 of them held 2 GB.
func TestBudget_SmallPartialRequestsAreCharged(t *testing.T) {
	const perRequest = readBufferBytes + minFrameBuffer // read buffer and request buffer
	const fit = 10
	server := NewBudget("server", 1<<20, nil)
	session := NewBudget("session", fit*perRequest, server)
	ls := serveLimited(t, 64, func() RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: session}
	})
	sess := rawSession(t, ls.addr)
	// A head that declares 4,000 bytes and sends a few: under the old
	// uncharged 4 KiB.
	head := echoStart(t, "Echo.Echo", 4000)
	for range fit {
		s, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, head)
	}
	testutil.WaitFor(t, 5*time.Second, usedIs(session, fit*perRequest))
	s, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, head)
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, _, err := readReply(s)
	if err != nil {
		t.Fatalf("small partial request past the budget exp: an answer got: %v", err)
	}
	if perr := structs.ParseError(netrpc.ServerError(resp.Error)); !errors.Is(perr, structs.ErrUnavailable) || !strings.Contains(resp.Error, "rpc.SessionBudgetBytes") {
		t.Fatalf("small partial request past the budget exp: unavailable naming rpc.SessionBudgetBytes got: %q", resp.Error)
	}
	if got := session.Used(); got != fit*perRequest {
		t.Fatalf("session budget after the refusal exp: %d got: %d", fit*perRequest, got)
	}
	sess.Close()
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 0))
}

// A request whose read buffer fits the budget but whose request buffer
// does not is refused while its header is read: the refusal is still
// answered, naming the budget, and everything it was charged is given
// back. Before, such a stream ended in a bare EOF (CI, the partial-request
// flood over several sessions: one stream per session caught the budget
// with room for the read buffer only).
func TestBudget_RefusedWhileTheHeaderIsReadIsAnswered(t *testing.T) {
	session := NewBudget("session", readBufferBytes+minFrameBuffer/2, nil)
	ls := serveLimited(t, 16, func() RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: session}
	})
	s, err := rawSession(t, ls.addr).OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, echoStart(t, "Echo.Echo", 4000))
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, _, err := readReply(s)
	if err != nil {
		t.Fatalf("request refused in its header exp: an answer got: %v", err)
	}
	if perr := structs.ParseError(netrpc.ServerError(resp.Error)); !errors.Is(perr, structs.ErrUnavailable) || !strings.Contains(resp.Error, "rpc.SessionBudgetBytes") || !streamEnded(resp.Error) {
		t.Fatalf("request refused in its header exp: unavailable naming rpc.SessionBudgetBytes, stream closed got: %q", resp.Error)
	}
	testutil.WaitFor(t, 5*time.Second, usedIs(session, 0))
	if n := ls.refused.Load(); n != 1 {
		t.Fatalf("refusals reported exp: 1 got: %d", n)
	}
}

// An idle stream holds no buffer and no budget: its read buffer is given
// back once a request has been read.
func TestBudget_IdleStreamHoldsNothing(t *testing.T) {
	server := NewBudget("server", 1<<20, nil)
	ls := serveLimited(t, 16, func() RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: NewBudget("session", 1<<20, server)}
	})
	mc := WrapSession(rawSession(t, ls.addr))
	var out string
	if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: strings.Repeat("y", 10<<10)}, &out); err != nil {
		t.Fatal(err)
	}
	if n := len(mc.idle); n != 1 {
		t.Fatalf("idle streams exp: 1 got: %d", n)
	}
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 0))
}

// Past MaxStreamsPerSession a new stream is refused: its request is
// answered with an unavailable error naming the limit and the stream is
// closed. A served stream that ends frees its place.
func TestServeStreams_CapRefusesNewStreams(t *testing.T) {
	const max = 3
	ls := serveLimited(t, max, func() RequestLimits { return RequestLimits{MaxBytes: 1 << 20} })
	sess := rawSession(t, ls.addr)
	var held []*yamux.Stream
	for i := range max {
		s, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		req := mustEncode(t, &netrpc.Request{ServiceMethod: "Block.Wait", Seq: uint64(i)})
		mustWrite(t, s, append(req, mustEncode(t, &EchoArgs{Payload: "held"})...))
		held = append(held, s)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := ls.block.arrived.Load(); n != max {
			return fmt.Errorf("calls held exp: %d got: %d", max, n)
		}
		return nil
	})
	extra, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = extra.Write(mustEncode(t, &netrpc.Request{ServiceMethod: "Echo.Echo", Seq: 9}))
	expRefusal(t, extra, 9, "rpc.MaxStreamsPerSession")
	if n := ls.refusals.Load(); n != 1 {
		t.Fatalf("streams refused exp: 1 got: %d", n)
	}
	extra.Close()
	// The held calls are answered, and one of their streams ends (its
	// peer closes it): a new stream is served.
	ls.block.releaseAll()
	for _, s := range held {
		if resp, body, err := readReply(s); err != nil || resp.Error != "" || body != "held" {
			t.Fatalf("held call exp: held got: %q %q %v", body, resp.Error, err)
		}
	}
	held[0].Close()
	mc := WrapSession(sess)
	testutil.WaitFor(t, 5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var out string
		return mc.Call(ctx, "Echo.Echo", &EchoArgs{Payload: "x"}, &out)
	})
}

// A peer that keeps opening streams past the cap without closing the
// refused ones loses its session at twice the cap.
func TestServeStreams_SessionClosedWhenRefusedStreamsPileUp(t *testing.T) {
	const max = 2
	ls := serveLimited(t, max, func() RequestLimits { return RequestLimits{MaxBytes: 1 << 20} })
	sess := rawSession(t, ls.addr)
	for i := range max {
		s, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		req := mustEncode(t, &netrpc.Request{ServiceMethod: "Block.Wait", Seq: uint64(i)})
		mustWrite(t, s, append(req, mustEncode(t, &EchoArgs{Payload: "held"})...))
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := ls.block.arrived.Load(); n != max {
			return fmt.Errorf("calls held exp: %d got: %d", max, n)
		}
		return nil
	})
	// Refused streams the peer never closes: the third goes past 2*max.
	for range max + 1 {
		if _, err := sess.OpenStream(); err != nil {
			break
		}
	}
	select {
	case <-sess.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatalf("session exp: closed by the server got: open with %d streams", sess.NumStreams())
	}
}

// A request must be read whole within ReadTimeout of its first byte; an
// idle stream between requests has no deadline. The same holds on a plain
// connection.
func TestRequestReadTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	budget := NewBudget("session", 1<<20, nil)
	ls := serveLimited(t, 16, func() RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: timeout, Budget: budget}
	})
	expTimeout := func(t *testing.T, conn io.Reader, began time.Time) {
		t.Helper()
		resp, _, err := readReply(conn)
		took := time.Since(began)
		if err != nil {
			t.Fatalf("partial request exp: a timeout answer got: %v", err)
		}
		if perr := structs.ParseError(netrpc.ServerError(resp.Error)); !errors.Is(perr, structs.ErrTimeout) || !strings.Contains(resp.Error, "rpc.RequestReadTimeout") {
			t.Fatalf("partial request exp: timeout naming rpc.RequestReadTimeout got: %q", resp.Error)
		}
		if took < timeout || took > timeout+5*time.Second {
			t.Fatalf("timeout answer exp: after %v got: after %v", timeout, took)
		}
	}

	t.Run("mux", func(t *testing.T) {
		sess := rawSession(t, ls.addr)
		// Idle for twice the deadline, then a call: served.
		mc := WrapSession(sess)
		var out string
		if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "a"}, &out); err != nil {
			t.Fatal(err)
		}
		<-time.After(2 * timeout) // the pooled stream idles past the deadline
		if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "b"}, &out); err != nil || out != "b" {
			t.Fatalf("call on a stream idle for %v exp: b got: %q %v", 2*timeout, out, err)
		}
		// A request that stops halfway is answered with a timeout.
		s, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		mustWrite(t, s, append(echoStart(t, "Echo.Echo", 64<<10), make([]byte, 32<<10)...))
		expTimeout(t, s, began)
		testutil.WaitFor(t, 5*time.Second, usedIs(budget, 0))
	})

	t.Run("plain", func(t *testing.T) {
		c, err := net.Dial("tcp", ls.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		mustWrite(t, c, []byte{byte(ProtoRPC)})
		<-time.After(2 * timeout) // idle before the first request
		began := time.Now()
		mustWrite(t, c, echoStart(t, "Echo.Echo", 1024))
		expTimeout(t, c, began)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("connection after the timeout exp: closed got: %v", err)
		}
	})
	if n := ls.echo.calls.Load(); n != 2 {
		t.Fatalf("handler calls exp: 2 (the complete ones) got: %d", n)
	}
	if n := ls.refused.Load(); n != 2 {
		t.Fatalf("refusals reported exp: 2 got: %d", n)
	}
}

// A stream the server closed after refusing a request is not reused by
// MuxClient: the next call takes a fresh one and is served.
func TestMuxClient_DropsAStreamTheServerEnded(t *testing.T) {
	ls := serveLimited(t, 16, func() RequestLimits { return RequestLimits{MaxBytes: 1024} })
	mc := WrapSession(rawSession(t, ls.addr))
	var out string
	err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: strings.Repeat("x", 4096)}, &out)
	if !errors.Is(err, structs.ErrTooLarge) {
		t.Fatalf("oversized call exp: too_large got: %v", err)
	}
	if n := len(mc.idle); n != 0 {
		t.Fatalf("idle streams after a refusal exp: 0 got: %d", n)
	}
	if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "ok"}, &out); err != nil || out != "ok" {
		t.Fatalf("next call exp: ok got: %q %v", out, err)
	}
}

// Past maxOpenStreams a caller waits for a stream instead of opening one
// the server would refuse, and gets the next one released.
func TestMuxClient_WaitsForAStreamPastItsBound(t *testing.T) {
	ls := serveLimited(t, MaxStreamsPerSession, func() RequestLimits { return RequestLimits{MaxBytes: 1 << 20} })
	mc := WrapSession(rawSession(t, ls.addr))
	// Take every slot but one as if that many streams were open.
	for range maxOpenStreams - 1 {
		mc.slots <- struct{}{}
	}
	var out string
	if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "a"}, &out); err != nil {
		t.Fatal(err)
	}
	// The last slot's stream is idle: a second call reuses it.
	held := mc.idle[0]
	mc.idle = nil
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := mc.Call(ctx, "Echo.Echo", &EchoArgs{Payload: "b"}, &out)
	cancel()
	if !errors.Is(err, structs.ErrTimeout) || !errors.Is(err, ErrNotSent) {
		t.Fatalf("call with every stream taken exp: timeout, not sent got: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		var out string
		done <- mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "c"}, &out)
	}()
	// Released (to the pool), the stream goes to the waiting caller.
	mc.release(held)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiting call exp: served got: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting call exp: served once a stream was released got: still waiting")
	}
}

// expRefusal reads a refused stream's answer: an unavailable error for
// request seq naming limit, after which the server closes the stream.
func expRefusal(t *testing.T, s net.Conn, seq uint64, limit string) {
	t.Helper()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, _, err := readReply(s)
	if err != nil {
		t.Fatalf("refused stream exp: an answer naming %s got: %v", limit, err)
	}
	perr := structs.ParseError(netrpc.ServerError(resp.Error))
	if resp.Seq != seq || !errors.Is(perr, structs.ErrUnavailable) || !strings.Contains(resp.Error, limit) || !streamEnded(resp.Error) {
		t.Fatalf("refused stream exp: seq %d unavailable naming %s, stream closed got: seq %d %q", seq, limit, resp.Seq, resp.Error)
	}
	if n, err := io.Copy(io.Discard, s); err != nil || n != 0 {
		t.Fatalf("refused stream after its answer exp: closed (EOF) got: %d more bytes, %v", n, err)
	}
}
