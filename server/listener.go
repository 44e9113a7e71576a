package server

import (
	"errors"
	"io"
	"net"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/raftnode"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/tlsutil"
)

// maxOpening bounds the connections that are still opening (first byte,
// TLS handshake) at once. Each holds a goroutine and a socket for at most
// firstByteTimeout, then its wait for a handshake turn and the handshake
// itself, each within the handshake bound (Config.TLSHandshakeTimeout);
// past maxOpening a new connection is closed at once, so a flood of silent
// or slow handshakes costs a fixed amount of memory.
const maxOpening = 256

// firstByteTimeout bounds how long a new connection may stay silent before
// naming its protocol, so idle half-open connections cannot pile up.
const firstByteTimeout = 10 * time.Second

func (s *Server) acceptLoop() {
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			select {
			case <-s.shutdownCh:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.logger.Error("accept failed", "error", err)
			time.Sleep(50 * time.Millisecond) // back off on EMFILE and the like
			continue
		}
		s.goFunc(func() { s.handleConn(conn) })
	}
}

// track remembers open connections so Shutdown can close them.
func (s *Server) track(c net.Conn) bool {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	select {
	case <-s.shutdownCh:
		c.Close()
		return false
	default:
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.connsMu.Lock()
	delete(s.conns, c)
	s.connsMu.Unlock()
}

func (s *Server) handleConn(conn net.Conn) {
	info, p, conn, ok := s.openConn(conn)
	if !ok {
		return
	}
	switch p {
	case rpc.ProtoRaft:
		// Only a server may speak Raft: with TLS its certificate must say
		// so (a client certificate can never join Raft or act as a server).
		if info.TLS && info.Role != tlsutil.RoleServer {
			s.refuse(conn, "raft connection without a server certificate", "role", string(info.Role))
			return
		}
		// Migration mode (-tls-allow-plaintext) takes plaintext Raft only
		// from a host already in the Raft configuration: a server not
		// switched to TLS yet. Anyone else would read every secret in the
		// log, or vote.
		if !info.TLS && info.ServerTLS && !(s.raft != nil && raftnode.MemberHost(s.raft.Raft, info.Remote)) {
			s.security.PlaintextRefused.Add(1)
			metrics.IncrCounter([]string{"tls", "plaintext_refused"}, 1)
			s.refuse(conn, "plaintext raft connection refused: the host is not in the Raft configuration (migration mode)")
			return
		}
		// Raft owns the connection from here.
		s.stream.Handoff(conn)
	case rpc.ProtoRPC:
		if !s.track(conn) {
			return
		}
		defer s.untrack(conn)
		// A plain connection counts as a session of its peer; one
		// request at a time on it, charged to the peer's budget, with
		// the read deadline (rpc_limits.go).
		peer, budget, ok := s.openPeer(conn, info, p)
		if !ok {
			return
		}
		if peer != nil {
			defer peer.Close()
		}
		s.newRPCServer(info).ServeCodec(measureCodec(rpc.NewLimitedServerCodec(conn, s.requestLimits(budget, info.Remote))))
	case rpc.ProtoMux:
		if !s.track(conn) {
			return
		}
		defer s.untrack(conn)
		peer, budget, ok := s.openPeer(conn, info, p)
		if !ok {
			return
		}
		if peer != nil {
			defer peer.Close()
		}
		s.serveMux(conn, info, peer, budget)
	case rpc.ProtoSnapshot:
		s.serveSnapshot(conn, info) // snapshot.go
	default:
		s.refuse(conn, "unknown protocol byte", "byte", byte(p))
	}
}

// openConn reads the protocol byte and, for TLS, does the handshake and
// reads the inner byte. It refuses plaintext when TLS is required. The
// whole opening runs under openSlots: connections that never finish
// opening cannot pile up past maxOpening, and each is closed after its
// deadline.
func (s *Server) openConn(conn net.Conn) (endpoints.ConnInfo, rpc.Protocol, net.Conn, bool) {
	info := endpoints.ConnInfo{Remote: conn.RemoteAddr().String(), ServerTLS: s.cfg.TLS != nil}
	release, why := s.openSlot(conn)
	if release == nil {
		s.security.OpeningRefused.Add(1)
		metrics.IncrCounter([]string{"rpc", "opening_refused"}, 1)
		// One line a second at most: a flood must not flood the log too.
		if now := time.Now().UnixNano(); now-s.lastOpenRefusalLog.Load() > int64(time.Second) {
			s.lastOpenRefusalLog.Store(now)
			s.logger.Warn("connection refused: "+why+" (further refusals within a second are counted, not logged)",
				"remote", info.Remote, "refused_total", s.security.OpeningRefused.Load())
		}
		conn.Close()
		return info, 0, nil, false
	}
	defer release()
	// Tracked while it opens, so that Shutdown closes it instead of
	// waiting out its deadlines (up to firstByteTimeout and twice the
	// handshake bound for a silent peer).
	if !s.track(conn) {
		return info, 0, nil, false
	}
	defer s.untrack(conn)
	_ = conn.SetReadDeadline(time.Now().Add(firstByteTimeout))
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		conn.Close()
		return info, 0, nil, false
	}
	_ = conn.SetReadDeadline(time.Time{})
	p := rpc.Protocol(b[0])
	if p != rpc.ProtoTLS {
		if s.cfg.TLS != nil && !s.cfg.TLSAllowPlaintext {
			s.security.PlaintextRefused.Add(1)
			metrics.IncrCounter([]string{"tls", "plaintext_refused"}, 1)
			s.refuse(conn, "plaintext connection refused: TLS is required", "byte", b[0])
			return info, 0, nil, false
		}
		return info, p, conn, true
	}
	if s.cfg.TLS == nil {
		s.refuse(conn, "TLS connection refused: TLS is not configured on this server")
		return info, 0, nil, false
	}
	// Each address's handshakes are paced (handshake_rate.go); the wait
	// holds this connection's opening slot.
	ip := info.Remote
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	bound := s.cfg.tlsHandshakeTimeout()
	wait, ok := s.limits.handshakes.reserve(ip, time.Now(), bound)
	if !ok {
		s.security.OpeningRefused.Add(1)
		metrics.IncrCounter([]string{"rpc", "opening_refused"}, 1)
		s.logRPCRefusal(s.limits, "connection refused", info.Remote,
			"too many TLS handshakes from this address: its turn would come after the "+bound.String()+" handshake bound (tls_handshake_timeout)")
		conn.Close()
		return info, 0, nil, false
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.shutdownCh:
			t.Stop()
			conn.Close()
			return info, 0, nil, false
		}
	}
	tc, inner, err := rpc.ServerHandshake(conn, s.cfg.TLS.IncomingConfig(), bound)
	if err != nil {
		s.security.TLSHandshakeFails.Add(1)
		metrics.IncrCounter([]string{"tls", "handshake_failures"}, 1)
		s.refuse(conn, "TLS handshake failed", "error", err)
		return info, 0, nil, false
	}
	info.TLS = true
	cs := tc.ConnectionState()
	info.Role = tlsutil.PeerRole(cs, s.cfg.TLS.Region())
	info.PeerCert = tlsutil.PeerCertHash(cs)
	return info, inner, tc, true
}

// maxOpeningPerIP bounds the connections one remote address may have
// opening at once, so that one host dialling again and again cannot hold
// every one of the maxOpening slots and shut everyone else out. Half of
// them: a client with many callers (claimd bench opens 64 sessions at
// once) stays well inside it.
const maxOpeningPerIP = maxOpening / 2

// openSlot takes a slot for a connection that is opening (global and per
// remote IP), or says why it cannot.
func (s *Server) openSlot(conn net.Conn) (release func(), why string) {
	ip := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	s.openingMu.Lock()
	if s.openingByIP[ip] >= maxOpeningPerIP {
		s.openingMu.Unlock()
		return nil, "too many connections opening at once from this address"
	}
	select {
	case s.openSlots <- struct{}{}:
	default:
		s.openingMu.Unlock()
		return nil, "too many connections opening at once"
	}
	s.openingByIP[ip]++
	s.openingMu.Unlock()
	return func() {
		<-s.openSlots
		s.openingMu.Lock()
		if s.openingByIP[ip]--; s.openingByIP[ip] == 0 {
			delete(s.openingByIP, ip)
		}
		s.openingMu.Unlock()
	}, ""
}

// refuse closes a connection with a warning that names the peer.
func (s *Server) refuse(conn net.Conn, why string, kv ...any) {
	s.logger.Warn("connection refused: "+why, append([]any{"remote", conn.RemoteAddr().String()}, kv...)...)
	conn.Close()
}

// serveMux serves every stream of a yamux session with one rpc.Server,
// within the RPC port's limits; peer is the session's peer (nil: a
// server) and parent the budget its session budget is charged to.
func (s *Server) serveMux(conn net.Conn, info endpoints.ConnInfo, peer *rpc.Peer, parent *rpc.Budget) {
	sess, err := rpc.NewYamuxServer(conn, s.logger)
	if err != nil {
		s.logger.Error("yamux session failed", "error", err)
		conn.Close()
		return
	}
	defer func() {
		s.nodes.Conns().RemoveSession(sess)
		sess.Close()
	}()
	info.Session = sess
	rs := s.newRPCServer(info)
	// Every stream's unfinished request is charged to the session's
	// budget, its peer's and the server's, and at most
	// rpc.MaxStreamsPerSession streams of the session and
	// rpc.MaxStreamsPerPeer of its peer are served at once
	// (rpc/limits.go, rpc/peers.go, rpc_limits.go).
	limits := s.requestLimits(s.sessionBudget(parent), info.Remote)
	s.serveStreams(sess, info, peer, limits, func(stream net.Conn) {
		rs.ServeCodec(measureCodec(rpc.NewLimitedServerCodec(stream, limits)))
	})
}
