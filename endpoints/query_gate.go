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

// Limits on the reads in flight on one server, issue 38: a read-only token
// parked 21,000 blocking Volume.List queries over 30 sessions on the
// leader (+550 MB; every volume write woke them all at once, writes took
// 2-7 s and the leader lost leadership twice). Every read served through
// blockingQuery (every Get and List, blocking or not) is in flight from
// when it is admitted until its answer is written: while it runs, while
// it waits for a change (parked), and while its answer waits for the
// connection (a caller that does not read its answers would otherwise pile
// them up: 21,000 unparked lists of 200 volumes left 3,144 answers waiting,
// 2 GB). Past a limit a read is refused at once with unavailable and a
// retry-after hint (structs.RetryLater), before it reads anything:
// refusing costs the server less than answering, and every client of this
// repository waits the hint out before it asks again (api.Client, the
// client agent), so a refusal never turns into a busy loop.
//
// A parked query costs its goroutines and stream (a few KiB: its reply is
// emptied while it waits, emptyReply) and one re-run of its read per
// change of what it read; re-runs take turns (rerun).
const (
	// maxParkedPerToken: one ACL token's reads in flight on one server
	// (the anonymous caller is one token). A CLI or UI user has a few
	// (the UI a handful per browser tab); api.Client waits out a refusal.
	// Every write to a table wakes every parked list of it, and each
	// re-reads and sends the whole list: this bounds what one token makes
	// a server do per write (32 lists of 200 volumes: 1.6 MB to encode).
	maxParkedPerToken = 32
	// maxParkedPerNode: a client agent parks one read (its allocations)
	// and reads each of its allocations that is stopping (Alloc.Get, all
	// at once when the node is drained); a node's answers are small.
	maxParkedPerNode = 64
	// maxParkedPerConn: one connection (a yamux session, or a plain RPC
	// connection). Every agent's HTTP API shares one session per server
	// among its users, hence many times the per-token limit.
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

// queryGate counts the reads in flight on one server, by credential, by
// connection and in all. The zero value is ready to use
// with the default limits.
type queryGate struct {
	limits queryLimits

	mu      sync.Mutex
	byCred  map[string]int
	byConn  map[*authz]int
	total   int
	refused map[string]*refusals
	lastLog atomic.Int64

	slotsOnce sync.Once
	slots     chan struct{}
}

// parkKey is who a read is charged to: the node whose secret the
// caller showed, else its token (the secret, used only as a map key here:
// never logged). A server calling with the server token is charged to the
// server's total only.
func parkKey(c *caller) (key string, node bool) {
	switch {
	case c == nil || c.server:
		return "", false
	case c.node == "" && (c.srv == nil || !c.srv.ACLEnabled()):
		// Without ACLs a token names no one: every caller would share
		// the anonymous count, and a cluster's whole read traffic would
		// be held to one token's share. The connection and the server
		// limits still apply.
		return "", false
	case c.node != "":
		return "node\x00" + c.node, true
	default:
		return "token\x00" + c.token, false
	}
}

// inFlight says what a read in flight is, for a refusal.
const inFlight = "; a read is in flight while it runs, waits for a change, or its answer waits to be written"

// enter admits a read, or refuses it with a retry-after hint. release
// must be called once its answer is written (releaseOnWrite).
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
	var why, bound string
	limit := 0
	switch {
	case key != "" && node && g.byCred[key] >= lim.perNode:
		why = fmt.Sprintf("%d reads of node %q are in flight on this server (at most %d per node)%s", g.byCred[key], c.node, lim.perNode, inFlight)
		bound, limit = key, lim.perNode
	case key != "" && !node && g.byCred[key] >= lim.perToken:
		why = fmt.Sprintf("%d reads with this token are in flight on this server (at most %d per token)%s", g.byCred[key], lim.perToken, inFlight)
		bound, limit = key, lim.perToken
	case conn != nil && g.byConn[conn] >= lim.perConn:
		why = fmt.Sprintf("%d reads of this connection are in flight on this server (at most %d per connection)%s", g.byConn[conn], lim.perConn, inFlight)
		bound, limit = fmt.Sprintf("conn\x00%p", conn), lim.perConn
	case g.total >= lim.perServer:
		why = fmt.Sprintf("%d reads are in flight on this server (at most %d on this server)%s", g.total, lim.perServer, inFlight)
		bound, limit = "server", lim.perServer
	}
	if why != "" {
		after := g.backOff(bound, limit)
		g.mu.Unlock()
		return nil, g.refuse(srv, c, method, why, after)
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

// refuse counts and logs (at most one line a second) a refused read and
// returns the caller's answer: unavailable, saying why and when to retry
// (backOff).
func (g *queryGate) refuse(srv *Deps, c *caller, method, why string, after time.Duration) error {
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
		srv.Logger.Warn("read refused: "+why+" (further refusals within a second are counted, not logged)",
			"method", method, "remote", remote, "refused_total", srv.Security.QueriesRefused.Load())
	}
	return structs.RetryLater(method+": "+why, after)
}

// maxRetryHint bounds the wait a refusal asks for.
const maxRetryHint = 30 * time.Second

// refusals counts one bound's refusals in the current second and the one
// before.
type refusals struct {
	second    time.Time
	now, prev int
}

// backOff counts a refusal at bound (whose limit is limit) and says how
// long the caller should wait: one to three seconds, times how many times
// over its bound the refused party asked in the last second, at most
// maxRetryHint. A client that parks a query or two and hits the bound by
// chance comes back in a second or two; 21,000 queries of one token come
// back about once every 25 seconds each (some 800 a second in all) rather
// than 10,000 times a second, which the refusals alone would cost the
// server two cores for. g.mu is held.
func (g *queryGate) backOff(bound string, limit int) time.Duration {
	now := time.Now().Truncate(time.Second)
	if g.refused == nil {
		g.refused = map[string]*refusals{}
	}
	r := g.refused[bound]
	if r == nil {
		if len(g.refused) >= 4096 {
			// Forget the quiet ones (a connection's key lives on after
			// it closes).
			for k, o := range g.refused {
				if now.Sub(o.second) > 2*time.Second {
					delete(g.refused, k)
				}
			}
		}
		r = &refusals{second: now}
		g.refused[bound] = r
	}
	switch {
	case now.Sub(r.second) == time.Second:
		r.prev, r.now, r.second = r.now, 0, now
	case now.Sub(r.second) > time.Second:
		r.prev, r.now, r.second = 0, 0, now
	}
	r.now++
	over := float64(max(r.now, r.prev)) / float64(max(limit, 1))
	after := time.Duration(float64(time.Second+time.Duration(rand.Int64N(int64(2*time.Second)))) * max(1, over))
	return min(after, maxRetryHint)
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

// unwritten holds the gate places of answered reads until their answers
// are written, by reply (a pointer net/rpc made for the one call).
var unwritten sync.Map

// writeTimeout frees a read's place if its answer was never reported
// written (a path that serves calls without the server's codec): a
// safety net, long enough that a caller who stops taking its answers is
// held at its bounds meanwhile.
const writeTimeout = 5 * time.Minute

// releaseOnWrite keeps a read's place in the gate until ResponseWritten
// reports its reply written (or writeTimeout passes). Between the handler's
// return and the write, net/rpc holds the reply while the connection's
// earlier answers go out: a caller that reads its answers slowly, or not
// at all, would otherwise pile up whole lists on the server (issue 38: a
// read-only token's 21,000 Volume.List calls left 3,144 answers of 100 KB
// each waiting to be written, 2 GB within seconds).
func releaseOnWrite(reply any, release func()) {
	var once sync.Once
	done := func() { once.Do(release) }
	timer := time.AfterFunc(writeTimeout, func() {
		unwritten.Delete(reply)
		done()
	})
	unwritten.Store(reply, func() {
		timer.Stop()
		done()
	})
}

// ResponseWritten is the server's codec reporting a call's answer written
// (or failed to write): a read's place in the query gate is free again.
// body is what net/rpc handed the codec: the call's reply.
func ResponseWritten(body any) {
	if body == nil {
		return
	}
	if f, ok := unwritten.LoadAndDelete(body); ok {
		f.(func())()
	}
}
