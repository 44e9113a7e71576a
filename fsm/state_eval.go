package fsm

import (
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

// EvalsByVolume returns a volume's evals sorted by ID.
func (s *StateStore) EvalsByVolume(ws memdb.WatchSet, volumeID string) ([]*structs.Eval, error) {
	return listAs[structs.Eval](s.list(ws, TableEvals, indexVolume, volumeID))
}
