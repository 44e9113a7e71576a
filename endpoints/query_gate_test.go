package endpoints

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// readTokens adds n tokens that grant volume:read and node:read.
func (w *world) readTokens(n int) []string {
	w.t.Helper()
	w.state.Must(w.t, structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{
		{Name: "read", Rules: "volume { policy = \"read\" }\nnode { policy = \"read\" }"}}})
	var toks []*structs.ACLToken
	var out []string
	for i := range n {
		s := structs.NewSecret()
		out = append(out, s)
		toks = append(toks, &structs.ACLToken{AccessorID: structs.NewSecret(), SecretID: s, Name: fmt.Sprintf("r%d", i),
			Type: structs.ACLTokenClient, Policies: []string{"read"}})
	}
	w.state.Must(w.t, structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: toks})
	return out
}

// parked is a blocking query started in the background.
type parked struct {
	done  chan error
	reply *structs.VolumeListResponse
}

// parkVolumeList starts a Volume.List that waits for the next change of
// the volumes table (up to a minute) on vol, with token.
func (w *world) parkVolumeList(vol *Volume, token string) *parked {
	p := &parked{done: make(chan error, 1), reply: &structs.VolumeListResponse{}}
	idx := w.state.State().TableIndex(fsm.TableVolumes)
	args := &structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: token, AllowStale: true,
		MinQueryIndex: idx, MaxQueryTime: time.Minute}}
	go func() { p.done <- vol.List(args, p.reply) }()
	return p
}

// waitParked waits until n queries wait on the server.
func (w *world) waitParked(n int64) {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.deps.Security.QueriesWaiting.Load() != n {
		if time.Now().After(deadline) {
			w.t.Fatalf("queries waiting exp: %d got: %d", n, w.deps.Security.QueriesWaiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// refusedNow runs a blocking Volume.List that must be refused at once with
// a retry-after hint naming limit.
func (w *world) refusedNow(vol *Volume, token, limit string) {
	w.t.Helper()
	p := w.parkVolumeList(vol, token)
	select {
	case err := <-p.done:
		after, ok := structs.RetryAfter(err)
		if !errors.Is(structs.ParseError(err), structs.ErrUnavailable) || !ok || after < time.Second || after > 3*time.Second {
			w.t.Fatalf("blocking query past the %s limit exp: unavailable with retry after 1-3 s got: %v", limit, err)
		}
		if !contains(err.Error(), limit) {
			w.t.Fatalf("refusal exp: names %q got: %v", limit, err)
		}
	case <-time.After(5 * time.Second):
		w.t.Fatalf("blocking query past the %s limit exp: refused at once got: still waiting", limit)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Parked blocking queries are bounded per token, per connection and per
// server, and per node for a node's secret; past a bound a query is
// refused at once (unavailable, retry after 1-3 s) and counted, and the
// parked ones still answer on the next change.
func TestQueryGate_BoundsPerTokenConnNodeAndServer(t *testing.T) {
	w := newWorld(t, true)
	w.deps.Security.queries.limits = queryLimits{perToken: 3, perConn: 5, perNode: 2, perServer: 8}
	toks := w.readTokens(4)
	c1 := w.receivers(w.conn(tlsutil.RoleCLI))["Volume"].(*Volume)
	c2 := w.receivers(w.conn(tlsutil.RoleCLI))["Volume"].(*Volume)
	c3 := w.receivers(w.conn(tlsutil.RoleCLI))["Volume"].(*Volume)
	var all []*parked
	for range 3 {
		all = append(all, w.parkVolumeList(c1, toks[0]))
	}
	w.waitParked(3)
	w.refusedNow(c2, toks[0], "per token")
	// Another token on the same connection, up to the connection's bound.
	for range 2 {
		all = append(all, w.parkVolumeList(c1, toks[1]))
	}
	w.waitParked(5)
	w.refusedNow(c1, toks[2], "per connection")
	// Other connections, up to the server's bound.
	for range 3 {
		all = append(all, w.parkVolumeList(c2, toks[2]))
	}
	w.waitParked(8)
	w.refusedNow(c3, toks[3], "at most 8 on this server")
	if got := w.deps.Security.QueriesRefused.Load(); got != 3 {
		t.Errorf("QueriesRefused exp: 3 got: %d", got)
	}
	// A read that would not wait counts too.
	err := c3.List(&structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: toks[3], AllowStale: true}}, &structs.VolumeListResponse{})
	if _, ok := structs.RetryAfter(err); !ok {
		t.Fatalf("non-blocking read past the server's bound exp: refused got: %v", err)
	}
	// The next change answers every parked query; then there is room again.
	w.state.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "v2", ExternalID: "e2",
		PluginID: "p", AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}}})
	for i, p := range all {
		select {
		case err := <-p.done:
			if err != nil || len(p.reply.Volumes) != 2 {
				t.Fatalf("parked query %d after a change exp: 2 volumes got: %d %v", i, len(p.reply.Volumes), err)
			}
			if i == 0 {
				// Answered but not yet written: still in flight.
				w.refusedNow(c3, toks[3], "at most 8 on this server")
			}
			ResponseWritten(p.reply) // what the server's codec does
		case <-time.After(10 * time.Second):
			t.Fatalf("parked query %d exp: answered after a change got: still waiting", i)
		}
	}
	w.waitParked(0)
	again := w.parkVolumeList(c1, toks[0])
	w.waitParked(1)
	// A read answered and written leaves its place.
	var now structs.VolumeListResponse
	if err := c3.List(&structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: toks[3], AllowStale: true}}, &now); err != nil || len(now.Volumes) != 2 {
		t.Fatalf("non-blocking read exp: answered got: %d volumes %v", len(now.Volumes), err)
	}
	ResponseWritten(&now)

	// A node's secret: bounded per node.
	alloc := w.receivers(w.conn(tlsutil.RoleClient))["Alloc"].(*Alloc)
	idx := w.state.State().TableIndex(fsm.TableAllocs)
	parkAlloc := func() chan error {
		done := make(chan error, 1)
		go func() {
			done <- alloc.List(&structs.AllocListRequest{NodeID: "n1", QueryOptions: structs.QueryOptions{AuthToken: "s-n1",
				AllowStale: true, MinQueryIndex: idx, MaxQueryTime: time.Minute}}, &structs.AllocListResponse{})
		}()
		return done
	}
	a1, a2 := parkAlloc(), parkAlloc()
	w.waitParked(3)
	select {
	case err := <-parkAlloc():
		if _, ok := structs.RetryAfter(err); !ok || !contains(err.Error(), `node "n1"`) {
			t.Fatalf("third query of node n1 exp: refused naming the node got: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("third query of node n1 exp: refused at once got: waiting")
	}
	w.state.Must(t, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{{ID: "a2", NodeID: "n1",
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v2"}}}}})
	w.state.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "v3", ExternalID: "e3",
		PluginID: "p", AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}}})
	for _, done := range []chan error{a1, a2, again.done} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	ResponseWritten(again.reply)
	if n := w.deps.Security.queries.total; n != 2 {
		// The two Alloc.List answers were never reported written.
		t.Fatalf("reads in flight exp: 2 (answers not written) got: %d", n)
	}
}

// A read's place is freed when its answer is written, and once only.
func TestResponseWritten_FreesThePlaceOnce(t *testing.T) {
	var n atomic.Int64
	reply := &structs.VolumeListResponse{}
	releaseOnWrite(reply, func() { n.Add(1) })
	ResponseWritten(&structs.VolumeListResponse{}) // another call's reply
	if n.Load() != 0 {
		t.Fatal("another reply written exp: place kept got: freed")
	}
	ResponseWritten(reply)
	ResponseWritten(reply)
	ResponseWritten(nil)
	ResponseWritten(struct{}{}) // net/rpc's body for an error answer
	if n.Load() != 1 {
		t.Fatalf("place freed exp: once got: %d", n.Load())
	}
}

// A parked query holds no data: its reply is emptied while it waits, and
// filled again by the read that answers.
func TestBlockingQuery_ParkedQueryHoldsNoData(t *testing.T) {
	w := newWorld(t, true)
	tok := w.readTokens(1)[0]
	vol := w.receivers(w.conn(tlsutil.RoleCLI))["Volume"].(*Volume)
	p := w.parkVolumeList(vol, tok)
	w.waitParked(1)
	// QueriesWaiting is written after the reply was emptied (an atomic:
	// the race detector sees the order).
	if p.reply.Volumes != nil {
		t.Fatalf("reply of a parked query exp: no volumes held got: %d", len(p.reply.Volumes))
	}
	w.state.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "v9", ExternalID: "e9",
		PluginID: "p", AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}}})
	if err := <-p.done; err != nil {
		t.Fatal(err)
	}
	if len(p.reply.Volumes) != 2 || p.reply.Index <= 1 {
		t.Fatalf("answer after the change exp: 2 volumes and an index got: %d volumes, index %d", len(p.reply.Volumes), p.reply.Index)
	}
}

// A query whose wait runs out reads once more and answers with the data
// as it is (its reply was emptied while it waited).
func TestBlockingQuery_TimeoutAnswersWithData(t *testing.T) {
	w := newWorld(t, true)
	tok := w.readTokens(1)[0]
	vol := w.receivers(w.conn(tlsutil.RoleCLI))["Volume"].(*Volume)
	idx := w.state.State().TableIndex(fsm.TableVolumes)
	var reply structs.VolumeListResponse
	err := vol.List(&structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: tok, AllowStale: true,
		MinQueryIndex: idx, MaxQueryTime: 50 * time.Millisecond}}, &reply)
	if err != nil || len(reply.Volumes) != 1 || reply.Index != idx {
		t.Fatalf("timed-out query exp: the one volume at index %d got: %d volumes, index %d, %v", idx, len(reply.Volumes), reply.Index, err)
	}
}

// After a change wakes many parked queries, their reads take turns: at
// most half the cores (at least one) read at once.
func TestBlockingQuery_RerunsTakeTurns(t *testing.T) {
	w := newWorld(t, true)
	const n = 16
	var running, most atomic.Int64
	var woke atomic.Bool
	fn := func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
		if _, err := state.Volumes(ws, ""); err != nil {
			return 0, err
		}
		if woke.Load() {
			r := running.Add(1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			running.Add(-1)
		}
		return state.TableIndex(fsm.TableVolumes), nil
	}
	idx := w.state.State().TableIndex(fsm.TableVolumes)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := &structs.QueryOptions{AllowStale: true, MinQueryIndex: idx, MaxQueryTime: time.Minute}
			errs <- blockingQuery(w.deps, nil, "Volume.List", opts, &structs.QueryMeta{}, fn)
		}()
	}
	w.waitParked(n)
	woke.Store(true)
	w.state.Must(t, structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{"v1"}})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if limit := int64(max(1, runtime.GOMAXPROCS(0)/2)); most.Load() > limit {
		t.Fatalf("reads running at once after a wake-up exp: <= %d got: %d", limit, most.Load())
	}
}

// emptyReply zeroes everything but the QueryMeta.
func TestEmptyReply(t *testing.T) {
	r := &structs.VolumeListResponse{Volumes: []*structs.Volume{{ID: "v"}}, QueryMeta: structs.QueryMeta{Index: 7, KnownLeader: true}}
	emptyReply(r)
	if r.Volumes != nil || r.Index != 7 || !r.KnownLeader {
		t.Fatalf("emptied reply exp: no volumes, meta kept got: %+v", r)
	}
	emptyReply(nil) // no panic
	var notStruct int
	emptyReply(&notStruct)
}

// The more a party is over its bound, the longer it is told to wait: a
// refusal or two asks for one to three seconds, a flood for maxRetryHint.
func TestQueryGate_BackOffGrowsWithTheFlood(t *testing.T) {
	var g queryGate
	g.mu.Lock()
	defer g.mu.Unlock()
	if d := g.backOff("token\x00a", 32); d < time.Second || d > 3*time.Second {
		t.Fatalf("first refusal's hint exp: 1-3 s got: %v", d)
	}
	var last time.Duration
	for range 32 * 40 {
		last = g.backOff("token\x00a", 32)
	}
	if last != maxRetryHint {
		t.Fatalf("hint after 40 times the bound in a second exp: %v got: %v", maxRetryHint, last)
	}
	if d := g.backOff("token\x00b", 32); d > 3*time.Second {
		t.Fatalf("another token's first refusal exp: 1-3 s got: %v", d)
	}
}

// A read forwarded from a follower holds a place on the follower until
// its answer is written there: a caller that does not take its answers
// cannot pile them up on the server it entered on either.
func TestQueryGate_ForwardedReadsCountWhereTheyEntered(t *testing.T) {
	w := newWorld(t, false)
	w.deps.Security.queries.limits = queryLimits{perToken: 2}
	tok := w.readTokens(1)[0]
	vol := w.receivers(w.conn(tlsutil.RoleCLI))["Volume"].(*Volume)
	list := func(reply *structs.VolumeListResponse) error {
		return vol.List(&structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: tok}}, reply)
	}
	var r1, r2 structs.VolumeListResponse
	for _, r := range []*structs.VolumeListResponse{&r1, &r2} {
		if err := list(r); err != nil {
			t.Fatalf("forwarded read exp: forwarded got: %v", err)
		}
	}
	if got := len(w.fwd.sent()); got != 2 {
		t.Fatalf("reads forwarded exp: 2 got: %d", got)
	}
	if err := list(&structs.VolumeListResponse{}); !contains(fmt.Sprint(err), "per token") {
		t.Fatalf("third forwarded read with two answers unwritten exp: refused got: %v", err)
	}
	ResponseWritten(&r1)
	if err := list(&structs.VolumeListResponse{}); err != nil {
		t.Fatalf("read after an answer was written exp: forwarded got: %v", err)
	}
}
