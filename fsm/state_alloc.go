package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// AllocByID returns an allocation, or nil, nil when there is none.
func (s *StateStore) AllocByID(ws memdb.WatchSet, id string) (*structs.Alloc, error) {
	return firstAs[structs.Alloc](s.first(ws, TableAllocs, indexID, id))
}

// Allocs returns every allocation sorted by ID.
func (s *StateStore) Allocs(ws memdb.WatchSet) ([]*structs.Alloc, error) {
	return listAs[structs.Alloc](s.list(ws, TableAllocs, indexID))
}

// AllocsByNode returns a node's allocations sorted by ID.
func (s *StateStore) AllocsByNode(ws memdb.WatchSet, nodeID string) ([]*structs.Alloc, error) {
	return listAs[structs.Alloc](s.list(ws, TableAllocs, indexNode, nodeID))
}
