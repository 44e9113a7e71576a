package endpoints

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/structs"
)

// Limits on blocking queries that wait for a change (parked), issue 38: a
// read-only token parked 21,000 Volume.List queries over 30 sessions on
// the leader (+550 MB; every volume write woke them all at once, writes
// took 2-7 s and the leader lost leadership twice). Past a limit a
// blocking query is refused at once with unavailable and a retry-after
// hint (structs.RetryLater), before it reads anything: refusing costs the
// server less than answering, and every client of this repository waits
// the hint out before it asks again (api.Client, the client agent), so a
// refusal never turns into a busy loop.
//
// A parked query costs its goroutines and stream (a few KiB, its reply is
// emptied while it waits: emptyReply) and one re-run of its read per
// change of what it read; re-runs take turns (rerunSlots).
const (
	// maxParkedPerToken: one ACL token's parked queries on one server
	// (the anonymous caller is one token). A CLI or UI user parks a few;
	// 256 leaves room for a few dozen browser tabs of the UI sharing one
	// token.
	maxParkedPerToken = 256
	// maxParkedPerNode: a client agent parks one (its allocations); a
	// restart may overlap the old query with the new one for a moment.
	maxParkedPerNode = 8
	// maxParkedPerConn: one connection (a yamux session, or a plain RPC
	// connection). Every agent's HTTP API shares one session per server
	// among its users, hence as high as the per-token limit.
	maxParkedPerConn = 256
	// maxParkedPerServer: everyone on one server. Each client agent parks
	// one query on the server its session is on, so 8192 leaves room for
	// the 5,000 agents of the scale target on one server (after the two
	// others failed), at about 10 KiB each (80 MB) when all are parked.
	maxParkedPerServer = 8192
)

// queryLimits are the bounds a queryGate enforces (zero: the defaults).
type queryLimits struct {
	perToken, perNode, perConn, perServer int
}

func (l queryLimits) orDefaults() queryLimits {
	if l.perToken <= 0 {
		l.perToken = maxParkedPerToken
	}
	if l.perNode <= 0 {
		l.perNode = maxParkedPerNode
	}
	if l.perConn <= 0 {
		l.perConn = maxParkedPerConn
	}
	if l.perServer <= 0 {
		l.perServer = maxParkedPerServer
	}
	return l
}

// queryGate counts the blocking queries of one server that may park, by
// credential, by connection and in all. The zero value is ready to use
// with the default limits.
type queryGate struct {
	limits queryLimits

	mu      sync.Mutex
	byCred  map[string]int
	byConn  map[*authz]int
	total   int
	lastLog atomic.Int64

	slotsOnce sync.Once
	slots     chan struct{}
}

// parkKey is who a parked query is charged to: the node whose secret the
// caller showed, else its token (the secret, used only as a map key here:
// never logged). A server calling with the server token is charged to the
// server's total only.
func parkKey(c *caller) (key string, node bool) {
	switch {
	case c == nil || c.server:
		return "", false
	case c.node != "":
		return "node\x00" + c.node, true
	default:
		return "token\x00" + c.token, false
	}
}

// enter admits a blocking query that may park, or refuses it with a
// retry-after hint. release must be called once the query has answered.
func (g *queryGate) enter(srv *Deps, c *caller, method string) (release func(), err error) {
	lim := g.limits.orDefaults()
	key, node := parkKey(c)
	var conn *authz
	if c != nil && c.a != nil && !c.id.forwarded {
		// A forwarded query arrived on a server's session, shared by every
		// caller of that server: the entry server's own connection is not
		// this one, so only the credential and the server count.
		conn = c.a
	}
	g.mu.Lock()
	var why string
	switch {
	case key != "" && node && g.byCred[key] >= lim.perNode:
		why = fmt.Sprintf("%d blocking queries of node %q wait on this server already (at most %d per node)", g.byCred[key], c.node, lim.perNode)
	case key != "" && !node && g.byCred[key] >= lim.perToken:
		why = fmt.Sprintf("%d blocking queries with this token wait on this server already (at most %d per token)", g.byCred[key], lim.perToken)
	case conn != nil && g.byConn[conn] >= lim.perConn:
		why = fmt.Sprintf("%d blocking queries of this connection wait on this server already (at most %d per connection)", g.byConn[conn], lim.perConn)
	case g.total >= lim.perServer:
		why = fmt.Sprintf("%d blocking queries wait on this server already (at most %d)", g.total, lim.perServer)
	}
	if why != "" {
		g.mu.Unlock()
		return nil, g.refuse(srv, c, method, why)
	}
	if g.byCred == nil {
		g.byCred, g.byConn = map[string]int{}, map[*authz]int{}
	}
	if key != "" {
		g.byCred[key]++
	}
	if conn != nil {
		g.byConn[conn]++
	}
	g.total++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if key != "" {
				if g.byCred[key]--; g.byCred[key] <= 0 {
					delete(g.byCred, key)
				}
			}
			if conn != nil {
				if g.byConn[conn]--; g.byConn[conn] <= 0 {
					delete(g.byConn, conn)
				}
			}
			g.total--
		})
	}, nil
}

// refuse counts and logs (at most one line a second) a refused query and
// returns the caller's answer: unavailable, saying why and when to retry.
// The wait is one to three seconds, spread so that refused callers do not
// come back together.
func (g *queryGate) refuse(srv *Deps, c *caller, method, why string) error {
	if srv != nil && srv.Security != nil {
		srv.Security.QueriesRefused.Add(1)
	}
	metrics.IncrCounterWithLabels([]string{"rpc", "query_refused"}, 1, []metrics.Label{{Name: "method", Value: method}})
	if now := time.Now().UnixNano(); srv != nil && srv.Logger != nil && now-g.lastLog.Load() > int64(time.Second) {
		g.lastLog.Store(now)
		remote := ""
		if c != nil && c.a != nil {
			remote = c.a.conn.Remote
		}
		srv.Logger.Warn("blocking query refused: "+why+" (further refusals within a second are counted, not logged)",
			"method", method, "remote", remote, "refused_total", srv.Security.QueriesRefused.Load())
	}
	after := time.Second + time.Duration(rand.Int64N(int64(2*time.Second)))
	return structs.RetryLater(method+": "+why, after)
}

// rerun takes a turn to run a parked query's read again after it woke
// (its data changed, its wait ran out, or the state was restored), and
// returns the function that gives the turn back. At most half the cores
// (at least one) re-run reads at once: a write that wakes thousands of
// parked queries makes them queue here, waiting cheaply, instead of all
// running together and starving Raft of the CPU it needs to heartbeat.
func (g *queryGate) rerun() func() {
	g.slotsOnce.Do(func() { g.slots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)) })
	g.slots <- struct{}{}
	return func() { <-g.slots }
}

// queryMetaType is the part of a reply a parked query keeps.
var queryMetaType = reflect.TypeOf(structs.QueryMeta{})

// emptyReply drops what a parked query read (every field of the reply
// but its QueryMeta): a query that waits holds no data, and reads again
// when it wakes. A Volume.List reply holds a copy of every volume; kept
// while parked, a few hundred parked lists of a large cluster would hold
// gigabytes. The reply starts each read as it started the first one.
func emptyReply(reply any) {
	v := reflect.ValueOf(reply)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	s := v.Elem()
	for i := range s.NumField() {
		f := s.Field(i)
		if s.Type().Field(i).Type == queryMetaType || !f.CanSet() {
			continue
		}
		f.SetZero()
	}
}
