package fsm

import (
	"fmt"

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
	tx := s.db.Txn(false)
	ch, raw, err := tx.FirstWatch(TablePlugins, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("read %s by %s: %w", TablePlugins, indexID, err)
	}
	s.watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*pluginRow).plugin(tx, true), nil
}

// PluginSummary returns a plugin's summary fields without its Controllers
// and Nodes maps, or nil, nil when no node runs it: O(1), where PluginByID
// assembles the maps from every instance once per change of the plugin.
// For readers that need only the counts, ControllerRequired, provider or
// capabilities.
func (s *StateStore) PluginSummary(ws memdb.WatchSet, id string) (*structs.Plugin, error) {
	raw, err := s.first(ws, TablePlugins, indexID, id)
	if err != nil || raw == nil {
		return nil, err
	}
	p := raw.(*pluginRow).summary
	return &p, nil
}

// Plugins returns every plugin sorted by ID.
func (s *StateStore) Plugins(ws memdb.WatchSet) ([]*structs.Plugin, error) {
	tx := s.db.Txn(false)
	it, err := tx.Get(TablePlugins, indexID)
	if err != nil {
		return nil, fmt.Errorf("list %s by %s: %w", TablePlugins, indexID, err)
	}
	s.watch(ws, it.WatchCh())
	var out []*structs.Plugin
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*pluginRow).plugin(tx, true))
	}
	return out, nil
}
