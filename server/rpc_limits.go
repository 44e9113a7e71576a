package server

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// rpcLimits is a server's share of the RPC port's limits (rpc/limits.go):
// the budget every session and plain connection charges its unfinished
// requests to, and the refusal counters.
type rpcLimits struct {
	budget *rpc.Budget
	// lastLog rate-limits refusal lines: a flood must not flood the log.
	lastLog         atomic.Int64
	requestsRefused atomic.Uint64
	streamsRefused  atomic.Uint64
}

// serverRPCLimits holds each Server's rpcLimits, keyed weakly so a stopped
// server is not kept alive by it (tests start many servers in a process).
// A field of Server would do the same; this keeps listener-side state out
// of the Server struct's file.
var serverRPCLimits sync.Map // weak.Pointer[Server] -> *rpcLimits

func (s *Server) rpcLimits() *rpcLimits {
	key := weak.Make(s)
	if l, ok := serverRPCLimits.Load(key); ok {
		return l.(*rpcLimits)
	}
	l, loaded := serverRPCLimits.LoadOrStore(key, &rpcLimits{budget: rpc.NewBudget("server", rpc.ServerBudgetBytes, nil)})
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[Server]) { serverRPCLimits.Delete(k) }, key)
	}
	return l.(*rpcLimits)
}

// requestLimits are the limits of one session (session: its own budget,
// charged to the server's too) or one plain connection (session nil: the
// server's budget only; such a connection reads one request at a time).
func (s *Server) requestLimits(session *rpc.Budget, remote string) rpc.RequestLimits {
	l := s.rpcLimits()
	budget := session
	if budget == nil {
		budget = l.budget
	}
	return rpc.RequestLimits{
		MaxBytes:    rpc.MaxRequestBytes,
		ReadTimeout: rpc.RequestReadTimeout,
		Budget:      budget,
		Refused: func(err *structs.CodedError) {
			l.requestsRefused.Add(1)
			metrics.IncrCounterWithLabels([]string{"rpc", "request_refused"}, 1,
				[]metrics.Label{{Name: "code", Value: string(err.Code)}})
			s.logRPCRefusal(l, "request refused", remote, err.Error())
		},
	}
}

// sessionBudget is a new session's budget, charged to the server's.
func (s *Server) sessionBudget() *rpc.Budget {
	return rpc.NewBudget("session", rpc.SessionBudgetBytes, s.rpcLimits().budget)
}

// streamRefused counts and logs a stream closed at once (or a session
// closed) by the per-session stream limit.
func (s *Server) streamRefused(remote, why string) {
	l := s.rpcLimits()
	l.streamsRefused.Add(1)
	metrics.IncrCounter([]string{"rpc", "stream_refused"}, 1)
	s.logRPCRefusal(l, "stream refused", remote, why)
}

// logRPCRefusal writes one warn line a second at most, with the peer.
func (s *Server) logRPCRefusal(l *rpcLimits, what, remote, why string) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.logger.Warn(what+": "+why+" (further refusals within a second are counted, not logged)",
		"remote", remote, "requests_refused_total", l.requestsRefused.Load(), "streams_refused_total", l.streamsRefused.Load())
}
