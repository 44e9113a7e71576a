package server

import (
	"net"
	"sync/atomic"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// rpcLimits is a server's share of the RPC port's limits (rpc/limits.go,
// rpc/peers.go): the budget every session and plain connection charges
// its unfinished requests to, and what each peer holds. Refusals are
// counted in the server's security counters (Status.Runtime:
// RequestsRefused, StreamsRefused, and OpeningRefused for sessions
// refused by the per-peer cap).
type rpcLimits struct {
	budget *rpc.Budget
	peers  *rpc.Peers
	// refusing bounds the refused sessions being answered at once (each
	// holds a session for up to rpc.RefusalReadTimeout); past it a
	// refused session is closed unanswered.
	refusing chan struct{}
	// handshakes paces the TLS handshakes of each remote address
	// (handshake_rate.go).
	handshakes *handshakeRate
	// lastLog rate-limits refusal lines: a flood must not flood the log.
	lastLog atomic.Int64
}

// maxRefusing is how many refused sessions are answered at once.
const maxRefusing = 32

func newRPCLimits() *rpcLimits {
	budget := rpc.NewBudget("server", rpc.ServerBudgetBytes, nil)
	return &rpcLimits{budget: budget, peers: rpc.NewPeers(budget), refusing: make(chan struct{}, maxRefusing),
		handshakes: newHandshakeRate(handshakeBurstPerIP, handshakesPerSecondPerIP)}
}

// peerKey names the peer of a connection for the per-peer caps; "" for a
// server (its certificate says so), which they exempt.
func peerKey(info endpoints.ConnInfo) string {
	if info.TLS && info.Role == tlsutil.RoleServer {
		return ""
	}
	return rpc.PeerKey(info.Remote, info.PeerCert)
}

// openPeer counts a new session or plain connection against its peer's
// cap. It returns the peer (nil for a server) and its budget, or, past
// the cap, ok false after refusing the connection (answered when a reply
// is possible) with a counter and a log line.
func (s *Server) openPeer(conn net.Conn, info endpoints.ConnInfo, p rpc.Protocol) (peer *rpc.Peer, budget *rpc.Budget, ok bool) {
	key := peerKey(info)
	if key == "" {
		return nil, s.limits.budget, true
	}
	peer, err := s.limits.peers.Open(key)
	if err == nil {
		return peer, peer.Budget(), true
	}
	s.security.OpeningRefused.Add(1)
	metrics.IncrCounter([]string{"rpc", "session_refused"}, 1)
	s.logRPCRefusal(s.limits, "connection refused", info.Remote, err.Error())
	select {
	case s.limits.refusing <- struct{}{}:
	default:
		conn.Close()
		return nil, nil, false
	}
	defer func() { <-s.limits.refusing }()
	lim := rpc.RequestLimits{Budget: s.limits.budget, ReadTimeout: rpc.RefusalReadTimeout}
	switch p {
	case rpc.ProtoMux:
		sess, yerr := rpc.NewYamuxServer(conn, s.logger)
		if yerr != nil {
			conn.Close()
			return nil, nil, false
		}
		rpc.RefuseSession(sess, lim, err.Error())
	default:
		rpc.AnswerRefusal(conn, lim, err.Error())
		conn.Close()
	}
	return nil, nil, false
}

// requestLimits are the limits of one session (budget: its own, charged
// to its peer's and the server's) or one plain connection (budget: its
// peer's, or the server's for a server; such a connection reads one
// request at a time).
func (s *Server) requestLimits(budget *rpc.Budget, remote string) rpc.RequestLimits {
	l := s.limits
	return rpc.RequestLimits{
		MaxBytes:    rpc.MaxRequestBytes,
		ReadTimeout: rpc.RequestReadTimeout,
		Budget:      budget,
		Refused: func(err *structs.CodedError) {
			s.security.RequestsRefused.Add(1)
			metrics.IncrCounterWithLabels([]string{"rpc", "request_refused"}, 1,
				[]metrics.Label{{Name: "code", Value: string(err.Code)}})
			s.logRPCRefusal(l, "request refused", remote, err.Error())
		},
	}
}

// sessionBudget is a new session's budget, charged to parent (its peer's
// budget, or the server's for a server).
func (s *Server) sessionBudget(parent *rpc.Budget) *rpc.Budget {
	return rpc.NewBudget("session", rpc.SessionBudgetBytes, parent)
}

// serveStreams serves a session's streams within the per-session and
// per-peer stream caps.
func (s *Server) serveStreams(sess *yamux.Session, info endpoints.ConnInfo, peer *rpc.Peer, limits rpc.RequestLimits, serve func(net.Conn)) {
	refusal := limits
	refusal.Refused = nil
	rpc.ServeStreams(sess, rpc.StreamLimits{PerSession: rpc.MaxStreamsPerSession, Peer: peer, Refusal: refusal},
		serve, func(why string) { s.streamRefused(info.Remote, why) })
}

// streamRefused counts and logs a stream refused (or a session closed) by
// the per-session or per-peer stream limit.
func (s *Server) streamRefused(remote, why string) {
	s.security.StreamsRefused.Add(1)
	metrics.IncrCounter([]string{"rpc", "stream_refused"}, 1)
	s.logRPCRefusal(s.limits, "stream refused", remote, why)
}

// logRPCRefusal writes one warn line a second at most, with the peer.
func (s *Server) logRPCRefusal(l *rpcLimits, what, remote, why string) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.logger.Warn(what+": "+why+" (further refusals within a second are counted, not logged)",
		"remote", remote, "requests_refused_total", s.security.RequestsRefused.Load(),
		"streams_refused_total", s.security.StreamsRefused.Load(), "opening_refused_total", s.security.OpeningRefused.Load())
}
