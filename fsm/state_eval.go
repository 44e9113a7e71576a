package fsm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// Evals live in their volume's row (decision 41); these readers present
// them as the eval API always has, sorted by ID.

func sortEvalsByID(evals []*structs.Eval) []*structs.Eval {
	slices.SortFunc(evals, func(a, b *structs.Eval) int { return strings.Compare(a.ID, b.ID) })
	return evals
}

// EvalByID returns an eval, or nil, nil when there is none. Evals have no
// index by ID (decision 41): this reads every volume, an operator's
// occasional read (about 10 ms at 100,000 volumes).
func (s *StateStore) EvalByID(ws memdb.WatchSet, id string) (*structs.Eval, error) {
	vols, err := listAs[structs.Volume](s.list(ws, TableVolumes, indexID))
	for _, v := range vols {
		if e := findEval(v, id); e != nil {
			return e, nil
		}
	}
	return nil, err
}

// Evals returns every eval sorted by ID.
func (s *StateStore) Evals(ws memdb.WatchSet) ([]*structs.Eval, error) {
	vols, err := listAs[structs.Volume](s.list(ws, TableVolumes, indexID))
	var out []*structs.Eval
	for _, v := range vols {
		out = append(out, v.Evals...)
	}
	return sortEvalsByID(out), err
}

// EvalsByStatus returns the evals in one status sorted by ID. Pending ones
// come from their own index; finished ones by a scan of all evals.
func (s *StateStore) EvalsByStatus(ws memdb.WatchSet, status structs.EvalStatus) ([]*structs.Eval, error) {
	if status == structs.EvalStatusPending {
		vols, err := listAs[structs.Volume](s.list(ws, TableVolumes, indexPendingSince))
		return sortEvalsByID(pendingEvalsOf(vols)), err
	}
	all, err := s.Evals(ws)
	return slices.DeleteFunc(all, func(e *structs.Eval) bool { return e.Status != status }), err
}

func pendingEvalsOf(vols []*structs.Volume) []*structs.Eval {
	var out []*structs.Eval
	for _, v := range vols {
		for _, e := range v.Evals {
			if e.Status == structs.EvalStatusPending {
				out = append(out, e)
			}
		}
	}
	return out
}

// PendingEvalsSince returns the evals that are pending and were last
// written after Raft index since, oldest write first (by the volume's
// first pending eval), and the highest ModifyIndex among them (since
// itself when there are none): the next call's since. ws is woken when a
// volume with a pending eval is written, or one enters or leaves the set.
func (s *StateStore) PendingEvalsSince(ws memdb.WatchSet, since uint64) ([]*structs.Eval, uint64, error) {
	txn := s.db.Txn(false)
	// The watch is the whole pending index's (LowerBound iterators cannot
	// be watched), read in the same transaction, so no change between the
	// read and the watch is missed.
	all, err := txn.Get(TableVolumes, indexPendingSince)
	if err != nil {
		return nil, since, fmt.Errorf("watch pending evals: %w", err)
	}
	s.watch(ws, all.WatchCh())
	it, err := txn.LowerBound(TableVolumes, indexPendingSince, since+1)
	if err != nil {
		return nil, since, fmt.Errorf("list pending evals since %d: %w", since, err)
	}
	var out []*structs.Eval
	last := since
	for raw := it.Next(); raw != nil; raw = it.Next() {
		for _, e := range pendingEvalsOf([]*structs.Volume{raw.(*structs.Volume)}) {
			out = append(out, e)
			if e.ModifyIndex > last {
				last = e.ModifyIndex
			}
		}
	}
	return out, last, nil
}

// EvalsByVolume returns a volume's evals sorted by ID.
func (s *StateStore) EvalsByVolume(ws memdb.WatchSet, volumeID string) ([]*structs.Eval, error) {
	v, err := firstAs[structs.Volume](s.first(ws, TableVolumes, indexID, volumeID))
	if v == nil {
		return nil, err
	}
	return sortEvalsByID(slices.Clone(v.Evals)), nil
}
