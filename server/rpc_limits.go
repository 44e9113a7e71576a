package server

import (
	"sync/atomic"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// rpcLimits is a server's share of the RPC port's limits (rpc/limits.go):
// the budget every session and plain connection charges its unfinished
// requests to. Refusals are counted in the server's security counters
// (Status.Runtime: RequestsRefused, StreamsRefused).
type rpcLimits struct {
	budget *rpc.Budget
	// lastLog rate-limits refusal lines: a flood must not flood the log.
	lastLog atomic.Int64
}

func newRPCLimits() *rpcLimits {
	return &rpcLimits{budget: rpc.NewBudget("server", rpc.ServerBudgetBytes, nil)}
}

// requestLimits are the limits of one session (session: its own budget,
// charged to the server's too) or one plain connection (session nil: the
// server's budget only; such a connection reads one request at a time).
func (s *Server) requestLimits(session *rpc.Budget, remote string) rpc.RequestLimits {
	l := s.limits
	budget := session
	if budget == nil {
		budget = l.budget
	}
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

// sessionBudget is a new session's budget, charged to the server's.
func (s *Server) sessionBudget() *rpc.Budget {
	return rpc.NewBudget("session", rpc.SessionBudgetBytes, s.limits.budget)
}

// streamRefused counts and logs a stream closed at once (or a session
// closed) by the per-session stream limit.
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
		"remote", remote, "requests_refused_total", s.security.RequestsRefused.Load(), "streams_refused_total", s.security.StreamsRefused.Load())
}
