package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// NodeByID returns a node, or nil, nil when there is none.
func (s *StateStore) NodeByID(ws memdb.WatchSet, id string) (*structs.Node, error) {
	return firstAs[structs.Node](s.first(ws, TableNodes, indexID, id))
}

// Nodes returns every node sorted by ID.
func (s *StateStore) Nodes(ws memdb.WatchSet) ([]*structs.Node, error) {
	return listAs[structs.Node](s.list(ws, TableNodes, indexID))
}

// PluginByID returns a plugin, or nil, nil when no node runs it.
func (s *StateStore) PluginByID(ws memdb.WatchSet, id string) (*structs.Plugin, error) {
	return firstAs[structs.Plugin](s.first(ws, TablePlugins, indexID, id))
}

// Plugins returns every plugin sorted by ID.
func (s *StateStore) Plugins(ws memdb.WatchSet) ([]*structs.Plugin, error) {
	return listAs[structs.Plugin](s.list(ws, TablePlugins, indexID))
}
