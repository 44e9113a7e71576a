package server

import (
	netrpc "net/rpc"
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/structs"
)

// statsInterval is how often the server refreshes its gauges. A gauge is a
// reading, not an event: it is set again on a clock so that it stays
// current (and stays in a Prometheus view with a retention) whether or not
// anything changes. One second costs one pass over the nodes table
// (about a millisecond for thousands of nodes).
const statsInterval = time.Second

// emitStats sets the server's gauges every statsInterval until shutdown.
func (s *Server) emitStats() {
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.setGauges()
		case <-s.shutdownCh:
			return
		}
	}
}

// setGauges: every server reports its own client sessions and release
// queue (0 on a follower, whose watcher is off, so a sum over servers is
// the cluster's), and the nodes by status from its copy of the state.
func (s *Server) setGauges() {
	metrics.SetGauge([]string{"server", "client_sessions"}, float32(s.nodes.Conns().Len()))
	st := s.watcher.Stats()
	metrics.SetGauge([]string{"watcher", "pending_evals"}, float32(st.PendingEvals))
	metrics.SetGauge([]string{"watcher", "queued"}, float32(st.Queued))
	metrics.SetGauge([]string{"watcher", "backoff"}, float32(st.Backoff))
	s.checkFenceFailures() // fence_alarm.go
	nodes, err := s.State().Nodes(nil)
	if err != nil {
		return
	}
	// Ready and down always, so that "no node down" reads 0, not absent.
	byStatus := map[structs.NodeStatus]int{structs.NodeStatusReady: 0, structs.NodeStatusDown: 0}
	for _, n := range nodes {
		byStatus[n.Status]++
	}
	for status, n := range byStatus {
		metrics.SetGaugeWithLabels([]string{"state", "nodes"}, float32(n),
			[]metrics.Label{{Name: "status", Value: string(status)}})
	}
}

// countClaim counts one claim or release through the claim batcher by its
// result: "ok" or the code of its refusal (max_claims, not_found, invalid,
// conflict, no_leader...).
func countClaim(req *structs.VolumeClaimRequest, res *structs.ClaimResult, err error) {
	op := "claim"
	if req.Release {
		op = "release"
	}
	if err == nil {
		err = res.Err()
	}
	result := structs.CodeOf(err)
	if result == "" {
		result = "ok"
	}
	metrics.IncrCounterWithLabels([]string{"claim", "requests"}, 1,
		[]metrics.Label{{Name: "op", Value: op}, {Name: "result", Value: result}})
}

// knownMethods are the RPC methods a label may name: a caller can send any
// method name, and each label value is a series kept for the life of the
// process.
var knownMethods = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for name := range endpoints.AccessRules() {
		m[name] = true
	}
	return m
})

func methodLabel(method string) string {
	if knownMethods()[method] {
		return method
	}
	return "unknown"
}

// measuredCodec times every call served on one connection or stream, from
// its header being read to its response being written, by method, and
// counts the calls that fail by method and code: one wrapper instead of a
// line in every endpoint. net/rpc serves the calls of one codec
// concurrently, so calls are matched by sequence number. Blocking queries
// count their wait.
type measuredCodec struct {
	netrpc.ServerCodec
	mu    sync.Mutex
	calls map[uint64]call
}

type call struct {
	method string
	start  time.Time
}

func measureCodec(c netrpc.ServerCodec) netrpc.ServerCodec {
	return &measuredCodec{ServerCodec: c, calls: map[uint64]call{}}
}

func (c *measuredCodec) ReadRequestHeader(r *netrpc.Request) error {
	if err := c.ServerCodec.ReadRequestHeader(r); err != nil {
		return err
	}
	c.mu.Lock()
	c.calls[r.Seq] = call{method: methodLabel(r.ServiceMethod), start: time.Now()}
	c.mu.Unlock()
	return nil
}

func (c *measuredCodec) WriteResponse(r *netrpc.Response, body any) error {
	err := c.ServerCodec.WriteResponse(r, body)
	// A read holds its place in the query gate until its answer is out.
	endpoints.ResponseWritten(body)
	if err != nil {
		// net/rpc drops this error: an answer that never reached its
		// caller is otherwise invisible (a caller gone mid-answer, or a
		// codec fault silencing answers: issue 38's flood found one).
		metrics.IncrCounter([]string{"rpc", "answer_write_failed"}, 1)
	}
	c.mu.Lock()
	cl, ok := c.calls[r.Seq]
	delete(c.calls, r.Seq)
	c.mu.Unlock()
	if !ok {
		return err
	}
	labels := []metrics.Label{{Name: "method", Value: cl.method}}
	metrics.MeasureSinceWithLabels([]string{"rpc", "request"}, cl.start, labels)
	if r.Error != "" {
		code := structs.CodeOf(netrpc.ServerError(r.Error))
		metrics.IncrCounterWithLabels([]string{"rpc", "errors"}, 1, append(labels, metrics.Label{Name: "code", Value: code}))
	}
	return err
}
