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
func blockingQuery(srv *Deps, c *caller, method string, opts *structs.QueryOptions, meta *structs.QueryMeta, fn queryFn) error {
	// A read that may not be stale is served by the leader (Forward saw
	// to that), and only from a state that holds everything committed.
	if !opts.AllowStale {
		if err := srv.WaitConsistentReads(); err != nil {
			return err
		}
	}
	var ctx context.Context = context.Background()
	if wait := opts.QueryWait(); wait > 0 {
		// Jitter spreads the wake-ups of many watchers that started together.
		wait += time.Duration(rand.Int64N(int64(wait)/16 + 1))
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	waited := false
	answer := func() error {
		if waited {
			return c.stillAllowed(method)
		}
		return nil
	}
	for {
		// One moment for the rows and the index (see StateStore.Snapshot).
		state := srv.State().Snapshot()
		ws := memdb.NewWatchSet()
		ws.Add(state.AbandonCh())
		idx, err := fn(ws, state)
		if err != nil {
			return err
		}
		// Index 0 would make a caller's next blocking query return at
		// once forever; 1 is "nothing written yet".
		if idx < 1 {
			idx = 1
		}
		meta.Index = idx
		setLeaderMeta(srv, meta)
		if opts.MinQueryIndex == 0 || idx > opts.MinQueryIndex {
			return answer()
		}
		select {
		case <-srv.ShutdownCh():
			return structs.ErrShutdown
		default:
		}
		waited = true
		srv.Security.QueriesWaiting.Add(1)
		err = ws.WatchCtx(ctx)
		srv.Security.QueriesWaiting.Add(-1)
		if err != nil {
			// Timed out: answer with what we have.
			return answer()
		}
	}
}

func setLeaderMeta(srv *Deps, meta *structs.QueryMeta) {
	meta.KnownLeader, meta.LastContact = srv.LeaderContact()
}
