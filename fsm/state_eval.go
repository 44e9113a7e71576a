package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// EvalByID returns an eval, or nil, nil when there is none.
func (s *StateStore) EvalByID(ws memdb.WatchSet, id string) (*structs.Eval, error) {
	return firstAs[structs.Eval](s.first(ws, TableEvals, indexID, id))
}

// Evals returns every eval sorted by ID.
func (s *StateStore) Evals(ws memdb.WatchSet) ([]*structs.Eval, error) {
	return listAs[structs.Eval](s.list(ws, TableEvals, indexID))
}

// EvalsByStatus returns the evals in one status sorted by ID; the leader
// re-scans the pending ones when it takes over.
func (s *StateStore) EvalsByStatus(ws memdb.WatchSet, status structs.EvalStatus) ([]*structs.Eval, error) {
	return listAs[structs.Eval](s.list(ws, TableEvals, indexStatus, string(status)))
}

// PendingEvalsSince returns the evals that are pending and were last
// written after Raft index since, oldest write first, and the highest
// ModifyIndex among them (since itself when there are none): the next call's
// since. ws is woken when any eval enters or leaves the pending set.
func (s *StateStore) PendingEvalsSince(ws memdb.WatchSet, since uint64) ([]*structs.Eval, uint64, error) {
	txn := s.db.Txn(false)
	// The watch comes from the status index: LowerBound iterators cannot be
	// watched. Both are read in the same transaction, so no change between
	// the read and the watch is missed.
	all, err := txn.Get(TableEvals, indexStatus, string(structs.EvalStatusPending))
	if err != nil {
		return nil, since, fmt.Errorf("watch pending evals: %w", err)
	}
	s.watch(ws, all.WatchCh())
	it, err := txn.LowerBound(TableEvals, indexPendingSince, since+1)
	if err != nil {
		return nil, since, fmt.Errorf("list pending evals since %d: %w", since, err)
	}
	var out []*structs.Eval
	last := since
	for raw := it.Next(); raw != nil; raw = it.Next() {
		e := raw.(*structs.Eval)
		out = append(out, e)
		if e.ModifyIndex > last {
			last = e.ModifyIndex
		}
	}
	return out, last, nil
}

// EvalsByVolume returns a volume's evals sorted by ID.
func (s *StateStore) EvalsByVolume(ws memdb.WatchSet, volumeID string) ([]*structs.Eval, error) {
	return listAs[structs.Eval](s.list(ws, TableEvals, indexVolume, volumeID))
}
