package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// Table names. Endpoints pass them to TableIndex for blocking queries.
const (
	TableIndexes = "index"
	TableNodes   = "nodes"
	TablePlugins = "plugins"
	TableVolumes = "volumes"
	TableAllocs  = "allocs"
	TableEvals   = "evals"
)

// Index names beside the "id" primary index.
const (
	indexID        = "id"
	indexPlugin    = "plugin_id"  // volumes by plugin
	indexClaimNode = "claim_node" // volumes by the node of any claim, live or past
	indexNode      = "node_id"    // allocs by node
	indexVolume    = "volume_id"  // evals by volume
	// indexPendingSince holds only pending evals, ordered by ModifyIndex,
	// so the release watcher reads just the evals that became pending
	// since its last look instead of every pending eval on every change.
	// There is no index of finished evals by status: every release writes
	// an eval three times (created, finished, pruned), and listing finished
	// evals by status is an operator's rare scan.
	indexPendingSince = "pending_since"
)

// IndexEntry is a row of the index table: the Raft index of the last write
// to a table. Deletes leave no row behind to carry a ModifyIndex, so a
// blocking query over a table needs this to notice them.
type IndexEntry struct {
	Key   string
	Value uint64
}

func schema() *memdb.DBSchema {
	id := func(field string) *memdb.IndexSchema {
		return &memdb.IndexSchema{Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: field}}
	}
	by := func(name, field string) *memdb.IndexSchema {
		return &memdb.IndexSchema{Name: name, Indexer: &memdb.StringFieldIndex{Field: field}}
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		TableIndexes: {Name: TableIndexes, Indexes: map[string]*memdb.IndexSchema{indexID: id("Key")}},
		TableNodes:   {Name: TableNodes, Indexes: map[string]*memdb.IndexSchema{indexID: id("ID")}},
		TablePlugins: {Name: TablePlugins, Indexes: map[string]*memdb.IndexSchema{
			indexID: id("ID"),
		}},
		TableVolumes: {Name: TableVolumes, Indexes: map[string]*memdb.IndexSchema{
			indexID:     id("ID"),
			indexPlugin: by(indexPlugin, "PluginID"),
			indexClaimNode: {Name: indexClaimNode, AllowMissing: true,
				Indexer: claimNodeIndexer{}},
		}},
		TableAllocs: {Name: TableAllocs, Indexes: map[string]*memdb.IndexSchema{
			indexID:   id("ID"),
			indexNode: by(indexNode, "NodeID"),
		}},
		TableEvals: {Name: TableEvals, Indexes: map[string]*memdb.IndexSchema{
			indexID:     id("ID"),
			indexVolume: by(indexVolume, "VolumeID"),
			indexPendingSince: {Name: indexPendingSince, AllowMissing: true,
				Indexer: pendingSinceIndexer{}},
		}},
	}}
}

// claimNodeIndexer indexes a volume under every node that holds a claim on
// it, live or past, so the watcher and the node-down path find a node's
// claims without scanning every volume. Claims live inside the volume row
// (they change together, in one transaction), hence a multi-index rather
// than a claims table.
type claimNodeIndexer struct{}

func (claimNodeIndexer) FromObject(raw any) (bool, [][]byte, error) {
	v, ok := raw.(*structs.Volume)
	if !ok {
		return false, nil, fmt.Errorf("claim_node index: %T is not a volume", raw)
	}
	seen := map[string]bool{}
	var out [][]byte
	for _, m := range []map[string]*structs.Claim{v.WriteClaims, v.ReadClaims, v.PastClaims} {
		for _, c := range m {
			if !seen[c.NodeID] {
				seen[c.NodeID] = true
				out = append(out, []byte(c.NodeID+"\x00"))
			}
		}
	}
	return len(out) > 0, out, nil
}

func (claimNodeIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("claim_node index: want 1 argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("claim_node index: argument %T is not a string", args[0])
	}
	return []byte(s + "\x00"), nil
}

// pendingSinceIndexer keys a pending eval by its ModifyIndex, big-endian so
// that byte order is numeric order and LowerBound is a range scan (memdb's
// UintFieldIndex uses uvarints, which do not sort). Other evals are left
// out of the index.
type pendingSinceIndexer struct{}

func (pendingSinceIndexer) FromObject(raw any) (bool, []byte, error) {
	e, ok := raw.(*structs.Eval)
	if !ok {
		return false, nil, fmt.Errorf("pending_since index: %T is not an eval", raw)
	}
	if e.Status != structs.EvalStatusPending {
		return false, nil, nil
	}
	return true, binary.BigEndian.AppendUint64(nil, e.ModifyIndex), nil
}

func (pendingSinceIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("pending_since index: want 1 argument, got %d", len(args))
	}
	i, ok := args[0].(uint64)
	if !ok {
		return nil, fmt.Errorf("pending_since index: argument %T is not a uint64", args[0])
	}
	return binary.BigEndian.AppendUint64(nil, i), nil
}
