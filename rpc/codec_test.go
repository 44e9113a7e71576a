package rpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	netrpc "net/rpc"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

type EchoArgs struct{ Payload string }

type echo struct{ calls atomic.Int64 }

func (e *echo) Echo(args *EchoArgs, reply *string) error {
	e.calls.Add(1)
	*reply = args.Payload
	return nil
}

func (e *echo) Missing(args *EchoArgs, reply *string) error {
	return structs.NotFound("volume", args.Payload)
}

// mustServe serves the echo service on a loopback listener with a small
// request limit, one codec per raw connection (after the protocol byte).
func mustServe(t *testing.T, limit int64) (string, *echo) {
	t.Helper()
	e := &echo{}
	rs := netrpc.NewServer()
	if err := rs.RegisterName("Echo", e); err != nil {
		t.Fatal(err)
	}
	addr := testutil.ServeLoopback(t, func(c net.Conn) { rs.ServeCodec(NewServerCodec(c, limit)) })
	return addr, e
}

func dialClient(t *testing.T, addr string) *netrpc.Client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := netrpc.NewClientWithCodec(NewClientCodec(c))
	t.Cleanup(func() { cl.Close() })
	return cl
}

func TestCodec_RoundTripAndCodedErrorsSurvive(t *testing.T) {
	addr, _ := mustServe(t, 1<<20)
	cl := dialClient(t, addr)
	var out string
	if err := cl.Call("Echo.Echo", &EchoArgs{Payload: "hi"}, &out); err != nil || out != "hi" {
		t.Fatalf("exp: hi got: %q %v", out, err)
	}
	err := structs.ParseError(cl.Call("Echo.Missing", &EchoArgs{Payload: "v1"}, &out))
	if !errors.Is(err, structs.ErrNotFound) || !strings.Contains(err.Error(), `"v1"`) {
		t.Fatalf("exp: not_found naming v1 got: %v", err)
	}
}

func TestCodec_OversizedRequestIsRefusedAndStreamClosed(t *testing.T) {
	addr, e := mustServe(t, 1024)
	cl := dialClient(t, addr)
	var out string
	err := cl.Call("Echo.Echo", &EchoArgs{Payload: strings.Repeat("x", 4096)}, &out)
	if err == nil {
		t.Fatal("oversized request exp: error got: served")
	}
	if perr := structs.ParseError(err); !errors.Is(perr, structs.ErrTooLarge) && !errors.Is(err, netrpc.ErrShutdown) && err != io.ErrUnexpectedEOF {
		t.Fatalf("oversized request exp: too_large or closed stream got: %v", err)
	}
	if n := e.calls.Load(); n != 0 {
		t.Fatalf("handler calls exp: 0 got: %d", n)
	}
	// The stream is closed: the next call on it fails.
	if err := cl.Call("Echo.Echo", &EchoArgs{Payload: "after"}, &out); err == nil {
		t.Fatal("call after an oversized frame exp: closed stream got: served")
	}
	// A new connection works.
	if err := dialClient(t, addr).Call("Echo.Echo", &EchoArgs{Payload: "ok"}, &out); err != nil || out != "ok" {
		t.Fatalf("new connection exp: ok got: %q %v", out, err)
	}
}

func TestCodec_MalformedFrameClosesConnectionWithoutCallingHandler(t *testing.T) {
	addr, e := mustServe(t, 1<<20)
	for name, frame := range map[string][]byte{
		"garbage":           {0xc1, 0xc1, 0xc1, 0xc1}, // 0xc1 is never used in msgpack
		"header wrong type": mustEncode(t, "not a header"),
		"truncated body": append(mustEncode(t, &netrpc.Request{ServiceMethod: "Echo.Echo", Seq: 1}),
			0xdb, 0x00, 0x00, 0x10, 0x00), // str32 of 4096 bytes, never sent
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(frame); err != nil {
				t.Fatal(err)
			}
			if name == "truncated body" {
				// Half a frame then silence: closing our side ends it.
				c.(*net.TCPConn).CloseWrite()
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadAll(c)
			// A reset is a close too: the server stops at the first bad
			// byte and may leave the rest of the frame unread.
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("exp: server closes the connection got: %v", err)
			}
		})
	}
	if n := e.calls.Load(); n != 0 {
		t.Fatalf("handler calls exp: 0 got: %d", n)
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := codec.NewEncoder(&buf, structs.MsgpackHandle).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMuxClient_CallsOverOneSessionAndTimesOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rs := netrpc.NewServer()
	_ = rs.RegisterName("Echo", &echo{})
	go serveMuxOnce(l, rs, func(c netrpc.ServerCodec) netrpc.ServerCodec { return c })
	mc, err := DialMux(context.Background(), nil, l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	for i := 0; i < 50; i++ {
		var out string
		if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "x"}, &out); err != nil || out != "x" {
			t.Fatalf("call %d exp: x got: %q %v", i, out, err)
		}
	}
	mc.Close()
	var out string
	err = mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "x"}, &out)
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("call on closed session exp: unavailable+not sent got: %v", err)
	}
}

// slow answers only once released, after the caller has given up.
type slow struct {
	release chan struct{}
	written chan struct{}
}

func (s *slow) Wait(args *EchoArgs, reply *string) error {
	<-s.release
	*reply = "late " + args.Payload
	return nil
}

// signalCodec reports each response written to the wire.
type signalCodec struct {
	netrpc.ServerCodec
	written chan struct{}
}

func (c signalCodec) WriteResponse(r *netrpc.Response, body any) error {
	err := c.ServerCodec.WriteResponse(r, body)
	if r.ServiceMethod == "Slow.Wait" {
		close(c.written)
	}
	return err
}

// Chaos regression: a reply that arrived after its call timed out was
// decoded into the caller's value while the caller was already using it (a
// data race under -race, and a value changing under the caller). The
// client now decodes into a fresh value and copies it out only on success.
func TestMuxClient_LateReplyAfterTimeoutNeverReachesTheCaller(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sl := &slow{release: make(chan struct{}), written: make(chan struct{})}
	rs := netrpc.NewServer()
	_ = rs.RegisterName("Slow", sl)
	_ = rs.RegisterName("Echo", &echo{})
	go serveMuxOnce(l, rs, func(c netrpc.ServerCodec) netrpc.ServerCodec {
		return signalCodec{ServerCodec: c, written: sl.written}
	})
	mc, err := DialMux(context.Background(), nil, l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()

	out := "untouched"
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = mc.Call(ctx, "Slow.Wait", &EchoArgs{Payload: "x"}, &out)
	cancel()
	if !errors.Is(err, structs.ErrTimeout) {
		t.Fatalf("call exp: timeout got: %v", err)
	}
	// The caller owns its value again: it writes it while the late reply
	// is sent (the race detector reports a concurrent write by the client).
	out = "mine"
	close(sl.release)
	select {
	case <-sl.written:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow handler never answered")
	}
	// A call on the same session after the late reply's frames.
	var echoed string
	if err := mc.Call(context.Background(), "Echo.Echo", &EchoArgs{Payload: "y"}, &echoed); err != nil || echoed != "y" {
		t.Fatalf("next call exp: y got: %q %v", echoed, err)
	}
	if out != "mine" {
		t.Fatalf("caller's value after a late reply exp: mine got: %q", out)
	}
}

// serveMuxOnce accepts one ProtoMux connection on l and serves rs on every
// stream of its yamux session, each codec passed through wrap.
func serveMuxOnce(l net.Listener, rs *netrpc.Server, wrap func(netrpc.ServerCodec) netrpc.ServerCodec) {
	c, err := l.Accept()
	if err != nil {
		return
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || Protocol(b[0]) != ProtoMux {
		c.Close()
		return
	}
	sess, err := newTestYamuxServer(c)
	if err != nil {
		return
	}
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go rs.ServeCodec(wrap(NewServerCodec(s, MaxRequestBytes)))
	}
}

// gate holds every call until n have arrived, so that n are in flight at
// once.
type gate struct {
	n       int64
	arrived atomic.Int64
	all     chan struct{}
}

func (g *gate) Hold(args *EchoArgs, reply *string) error {
	if g.arrived.Add(1) == g.n {
		close(g.all)
	}
	<-g.all
	*reply = args.Payload
	return nil
}

// A peer session carries as many calls at once as a follower has callers
// to forward; once they have run, the next round of as many reuses their
// streams instead of opening (and closing) a stream per call.
func TestMuxClient_ConcurrentCallsReuseTheirStreams(t *testing.T) {
	const inFlight = 64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var g atomic.Pointer[gate]
	rs := netrpc.NewServer()
	_ = rs.RegisterName("Gate", &gateService{g: &g})
	var opened atomic.Int64
	go serveMuxOnce(l, rs, func(c netrpc.ServerCodec) netrpc.ServerCodec { opened.Add(1); return c })
	mc, err := DialMux(context.Background(), nil, l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	round := func() {
		g.Store(&gate{n: inFlight, all: make(chan struct{})})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		errs := make(chan error, inFlight)
		for i := 0; i < inFlight; i++ {
			go func() {
				var out string
				errs <- mc.Call(ctx, "Gate.Hold", &EchoArgs{Payload: "x"}, &out)
			}()
		}
		for i := 0; i < inFlight; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	first := opened.Load()
	round()
	if again := opened.Load() - first; again != 0 {
		t.Fatalf("streams opened by a second round of %d concurrent calls exp: 0 (reused) got: %d (first round opened %d)", inFlight, again, first)
	}
}

// gateService serves the current gate.
type gateService struct{ g *atomic.Pointer[gate] }

func (s *gateService) Hold(args *EchoArgs, reply *string) error { return s.g.Load().Hold(args, reply) }
