package endpoints

import (
	"context"
	"math/rand/v2"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// queryFn reads from state, adding what it read to ws, and returns the
// index of the newest change to what it read.
type queryFn func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error)

// blockingQuery runs fn once, and again each time what it watched changes,
// until the index passes opts.MinQueryIndex or the wait runs out. Without a
// MinQueryIndex it runs fn once. A query that waited checks its caller
// again before it answers: a token deleted or expired, or a node
// deregistered, while the query waited gets no fresh data.
//
// Every read is admitted by the server's query gate first, and refused at
// once past its limits (query_gate.go); it holds its place until its
// answer is written to the caller (ResponseWritten), so that a caller who
// does not take its answers cannot pile them up on the server. While a
// query waits it holds no data (emptyReply), and after it wakes it reads
// again in its turn (queryGate.rerun); when its wait runs out it reads
// once more and answers with that.
func blockingQuery(srv *Deps, c *caller, method string, opts *structs.QueryOptions, meta *structs.QueryMeta, fn queryFn) (err error) {
	// A read that may not be stale is served by the leader (Forward saw
	// to that), and only from a state that holds everything committed.
	if !opts.AllowStale {
		if err := srv.WaitConsistentReads(); err != nil {
			return err
		}
	}
	gate := &srv.Security.queries
	release, err := gate.enter(srv, c, method)
	if err != nil {
		return err
	}
	defer func() {
		// An error answer carries no reply (net/rpc sends an empty body):
		// its place is free now.
		if err != nil || c == nil || c.reply == nil {
			release()
			return
		}
		releaseOnWrite(c.reply, release)
	}()
	var ctx context.Context = context.Background()
	if wait := opts.QueryWait(); wait > 0 {
		// Jitter spreads the wake-ups of many watchers that started together.
		wait += time.Duration(rand.Int64N(int64(wait)/16 + 1))
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	waited, timedOut := false, false
	// A snapshot restore replaces the whole state, often with an older
	// index than the caller's: the change is answered at once, whatever
	// the index says (a caller seeing a lower index starts over), instead
	// of waiting for new writes to carry the index past the old one.
	origin := srv.State()
	answer := func() error {
		if waited {
			return c.stillAllowed(method)
		}
		return nil
	}
	for {
		idx, ws, qerr := runQuery(srv, gate, waited, fn)
		if qerr != nil {
			return qerr
		}
		meta.Index = idx
		setLeaderMeta(srv, meta)
		if opts.MinQueryIndex == 0 || idx > opts.MinQueryIndex || timedOut || srv.State() != origin {
			return answer()
		}
		select {
		case <-srv.ShutdownCh():
			return structs.ErrShutdown
		default:
		}
		waited = true
		if c != nil {
			emptyReply(c.reply)
		}
		srv.Security.QueriesWaiting.Add(1)
		werr := ws.WatchCtx(ctx)
		srv.Security.QueriesWaiting.Add(-1)
		// Timed out: read once more and answer with what there is.
		timedOut = werr != nil
	}
}

// runQuery reads once from a snapshot of the state; a read after a wait
// takes its turn (queryGate.rerun). Index 0 becomes 1: 0 would make a
// caller's next blocking query return at once forever; 1 is "nothing
// written yet".
func runQuery(srv *Deps, gate *queryGate, again bool, fn queryFn) (uint64, memdb.WatchSet, error) {
	if again {
		defer gate.rerun()()
	}
	// One moment for the rows and the index (see StateStore.Snapshot).
	state := srv.State().Snapshot()
	ws := memdb.NewWatchSet()
	ws.Add(state.AbandonCh())
	idx, err := fn(ws, state)
	return max(idx, 1), ws, err
}

func setLeaderMeta(srv *Deps, meta *structs.QueryMeta) {
	meta.KnownLeader, meta.LastContact = srv.LeaderContact()
}
