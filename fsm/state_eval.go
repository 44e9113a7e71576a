package fsm

import (
	"fmt"
	"slices"
	"strings"

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

// EvalsByStatus returns the evals in one status sorted by ID. Pending ones
// come from their own index; finished ones by a scan of all evals.
func (s *StateStore) EvalsByStatus(ws memdb.WatchSet, status structs.EvalStatus) ([]*structs.Eval, error) {
	if status == structs.EvalStatusPending {
		evals, err := listAs[structs.Eval](s.list(ws, TableEvals, indexPendingSince))
		slices.SortFunc(evals, func(a, b *structs.Eval) int { return strings.Compare(a.ID, b.ID) })
		return evals, err
	}
	all, err := s.Evals(ws)
	return slices.DeleteFunc(all, func(e *structs.Eval) bool { return e.Status != status }), err
}

// PendingEvalsSince returns the evals that are pending and were last
// written after Raft index since, oldest write first, and the highest
// ModifyIndex among them (since itself when there are none): the next call's
// since. ws is woken when any eval enters or leaves the pending set.
func (s *StateStore) PendingEvalsSince(ws memdb.WatchSet, since uint64) ([]*structs.Eval, uint64, error) {
	txn := s.db.Txn(false)
	// The watch is the whole pending index's (LowerBound iterators cannot
	// be watched), read in the same transaction, so no change between the
	// read and the watch is missed.
	all, err := txn.Get(TableEvals, indexPendingSince)
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
