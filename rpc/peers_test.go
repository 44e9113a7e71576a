package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	netrpc "net/rpc"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

func TestPeerKey(t *testing.T) {
	for _, c := range []struct{ remote, cert, exp string }{
		{"10.0.0.5:41000", "", "address 10.0.0.5"},
		{"[::1]:41000", "", "address ::1"},
		{"10.0.0.5:41000", strings.Repeat("ab", 32), "certificate abababababababab at 10.0.0.5"},
	} {
		if got := PeerKey(c.remote, c.cert); got != c.exp {
			t.Errorf("PeerKey(%q, %q) exp: %q got: %q", c.remote, c.cert, c.exp, got)
		}
	}
	// Two ports of one host are one peer.
	if PeerKey("10.0.0.5:1", "") != PeerKey("10.0.0.5:2", "") {
		t.Error("two connections from one address exp: one peer got: two")
	}
}

// holdBlocked opens a stream on sess with a Block.Wait call that the
// server holds until released.
func holdBlocked(t *testing.T, sess *yamux.Session, seq uint64) *yamux.Stream {
	t.Helper()
	s, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	req := mustEncode(t, &netrpc.Request{ServiceMethod: "Block.Wait", Seq: seq})
	mustWrite(t, s, append(req, mustEncode(t, &EchoArgs{Payload: "held"})...))
	return s
}

func arrivedIs(ls *limitedServer, n int64) func() error {
	return func() error {
		if got := ls.block.arrived.Load(); got != n {
			return fmt.Errorf("calls held exp: %d got: %d", n, got)
		}
		return nil
	}
}

// Issue 38: one peer's streams are bounded over all its sessions, not per
// session only: past MaxStreamsPerPeer a new stream on any of its
// sessions is answered unavailable naming the limit, and a stream that
// ends frees its place.
func TestPeers_StreamsCappedAcrossSessions(t *testing.T) {
	const maxStreams = 3
	peers := NewPeersWith(NewBudget("server", 1<<20, nil), 10, maxStreams, 1<<20)
	ls := serveLimitedPeers(t, 16, peers, func(pe *Peer) RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: NewBudget("session", 1<<20, pe.Budget())}
	})
	sess1, sess2 := rawSession(t, ls.addr), rawSession(t, ls.addr)
	held := []*yamux.Stream{holdBlocked(t, sess1, 1), holdBlocked(t, sess1, 2), holdBlocked(t, sess2, 3)}
	testutil.WaitFor(t, 5*time.Second, arrivedIs(ls, maxStreams))
	extra, err := sess2.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, extra, mustEncode(t, &netrpc.Request{ServiceMethod: "Echo.Echo", Seq: 9}))
	expRefusal(t, extra, 9, "rpc.MaxStreamsPerPeer")
	if n := ls.refusals.Load(); n != 1 {
		t.Fatalf("streams refused exp: 1 got: %d", n)
	}
	extra.Close()
	ls.block.releaseAll()
	for _, s := range held {
		if resp, body, err := readReply(s); err != nil || resp.Error != "" || body != "held" {
			t.Fatalf("held call exp: held got: %q %q %v", body, resp.Error, err)
		}
	}
	held[0].Close()
	mc := WrapSession(sess2)
	testutil.WaitFor(t, 5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var out string
		return mc.Call(ctx, "Echo.Echo", &EchoArgs{Payload: "x"}, &out)
	})
}

// Issue 38: a peer may keep at most MaxSessionsPerPeer sessions (and
// plain connections) open; the next one's calls are answered unavailable
// naming the limit and it is closed. Once one closes, a new one is
// served.
func TestPeers_SessionsCapped(t *testing.T) {
	const maxSessions = 2
	peers := NewPeersWith(NewBudget("server", 1<<20, nil), maxSessions, 100, 1<<20)
	ls := serveLimitedPeers(t, 16, peers, func(pe *Peer) RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: NewBudget("session", 1<<20, pe.Budget())}
	})
	call := func(sess *yamux.Session) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out string
		return WrapSession(sess).Call(ctx, "Echo.Echo", &EchoArgs{Payload: "x"}, &out)
	}
	first := rawSession(t, ls.addr)
	if err := call(first); err != nil {
		t.Fatal(err)
	}
	// A plain connection counts as a session.
	plain, err := net.Dial("tcp", ls.addr)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, plain, []byte{byte(ProtoRPC)})
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := peers.Sessions(PeerKey(plain.LocalAddr().String(), "")); n != maxSessions {
			return fmt.Errorf("sessions counted exp: %d got: %d", maxSessions, n)
		}
		return nil
	})
	err = call(rawSession(t, ls.addr))
	if !errors.Is(err, structs.ErrUnavailable) || !strings.Contains(err.Error(), "rpc.MaxSessionsPerPeer") {
		t.Fatalf("call on a session past the cap exp: unavailable naming rpc.MaxSessionsPerPeer got: %v", err)
	}
	if n := ls.sessionsRefused.Load(); n != 1 {
		t.Fatalf("sessions refused exp: 1 got: %d", n)
	}
	plain.Close()
	testutil.WaitFor(t, 5*time.Second, func() error { return call(rawSession(t, ls.addr)) })
}

// Issue 38: a peer's budget is shared by its sessions: a large request on
// a second session of the same peer is refused naming rpc.PeerBudgetBytes
// although that session's own budget has room.
func TestPeers_BudgetSharedAcrossSessions(t *testing.T) {
	server := NewBudget("server", 1<<20, nil)
	peers := NewPeersWith(server, 10, 100, 100<<10)
	ls := serveLimitedPeers(t, 16, peers, func(pe *Peer) RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: NewBudget("session", 512<<10, pe.Budget())}
	})
	sess1, sess2 := rawSession(t, ls.addr), rawSession(t, ls.addr)
	held, err := sess1.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, held, echoStart(t, "Echo.Echo", 50<<10))
	mustWrite(t, held, make([]byte, 40<<10))
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 64<<10+readBufferBytes))
	s, err := sess2.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, echoStart(t, "Echo.Echo", 50<<10))
	_, _ = s.Write(make([]byte, 40<<10))
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, _, err := readReply(s)
	if err != nil {
		t.Fatalf("refusal exp: an answer got: %v", err)
	}
	if perr := structs.ParseError(netrpc.ServerError(resp.Error)); !errors.Is(perr, structs.ErrUnavailable) || !strings.Contains(resp.Error, "rpc.PeerBudgetBytes") {
		t.Fatalf("refusal exp: unavailable naming rpc.PeerBudgetBytes got: %q", resp.Error)
	}
	mustWrite(t, held, make([]byte, 10<<10))
	if resp, body, err := readReply(held); err != nil || resp.Error != "" || len(body) != 50<<10 {
		t.Fatalf("held call exp: echoed got: %d %q %v", len(body), resp.Error, err)
	}
	testutil.WaitFor(t, 5*time.Second, usedIs(server, 0))
}

// Refused streams a peer never closes each hold a goroutine: once a peer
// keeps MaxStreamsPerPeer of them open, over any of its sessions, the
// session that opens one more is closed.
func TestPeers_RefusedStreamsPileUpCloseTheSession(t *testing.T) {
	const maxStreams = 2
	peers := NewPeersWith(NewBudget("server", 1<<20, nil), 10, maxStreams, 1<<20)
	ls := serveLimitedPeers(t, 16, peers, func(pe *Peer) RequestLimits {
		return RequestLimits{MaxBytes: 1 << 20, ReadTimeout: time.Minute, Budget: NewBudget("session", 1<<20, pe.Budget())}
	})
	sess1, sess2 := rawSession(t, ls.addr), rawSession(t, ls.addr)
	holdBlocked(t, sess1, 1)
	holdBlocked(t, sess1, 2)
	testutil.WaitFor(t, 5*time.Second, arrivedIs(ls, maxStreams))
	// Two refused streams, never closed by the peer.
	for range maxStreams {
		if _, err := sess1.OpenStream(); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := ls.refusals.Load(); n != maxStreams {
			return fmt.Errorf("streams refused exp: %d got: %d", maxStreams, n)
		}
		return nil
	})
	// One more on the peer's other session costs that session (the open
	// itself may already see it closed).
	if _, err := sess2.OpenStream(); err != nil && !errors.Is(err, yamux.ErrSessionShutdown) {
		t.Fatal(err)
	}
	select {
	case <-sess2.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatalf("session exp: closed by the server got: open with %d streams", sess2.NumStreams())
	}
}
