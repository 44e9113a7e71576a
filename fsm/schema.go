package fsm

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// Table names. Endpoints pass them to TableIndex for blocking queries.
const (
	TableIndexes = "index"
	TableNodes   = "nodes"
	TablePlugins = "plugins"
	// TablePluginInstances holds each plugin's controllers and nodes, one
	// row per plugin, kind and node (see plugins.go). Readers get them in
	// structs.Plugin's maps from PluginByID and Plugins.
	TablePluginInstances = "plugin_instances"
	TableVolumes         = "volumes"
	TableAllocs          = "allocs"
	// TableEvals names the evals for TableIndex and snapshots; the evals
	// themselves live in their volume's row (structs.Volume.Evals,
	// decision 41).
	TableEvals = "evals"
	// TableACLPolicies and TableACLTokens hold ACL policies by name and
	// tokens by accessor ID (with an index on the secret's hash).
	TableACLPolicies = "acl_policies"
	TableACLTokens   = "acl_tokens"
	// TableStorageReports holds each plugin's last reconciliation round
	// (structs.StorageReport), by plugin ID.
	TableStorageReports = "storage_reports"
)

// Index names beside the "id" primary index.
const (
	indexID        = "id"
	indexClaimNode = "claim_node" // volumes by the node of any claim, live or past
	indexNode      = "node_id"    // allocs by node
	// indexPendingSince holds only the volumes with a pending eval,
	// ordered by that eval's ModifyIndex, so the release watcher reads just
	// the evals that became pending since its last look instead of every
	// pending eval on every change. There is no index of finished evals by
	// status: listing them is an operator's rare scan.
	indexPendingSince = "pending_since"
	// indexSecret finds a token by the SHA-256 of its secret: a lookup by
	// the hash leaks nothing about the secret through timing, and the
	// secret itself is then compared in constant time.
	indexSecret = "secret"
)

// IndexEntry is a row of the index table: the Raft index of the last write
// to a table. Deletes leave no row behind to carry a ModifyIndex, so a
// blocking query over a table needs this to notice them.
type IndexEntry struct {
	Key   string
	Value uint64
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		TableIndexes: {Name: TableIndexes, Indexes: map[string]*memdb.IndexSchema{
			indexID: primary(func(e *IndexEntry) string { return e.Key }),
		}},
		TableNodes: {Name: TableNodes, Indexes: map[string]*memdb.IndexSchema{
			indexID: primary(func(n *structs.Node) string { return n.ID }),
		}},
		TablePlugins: {Name: TablePlugins, Indexes: map[string]*memdb.IndexSchema{
			indexID: primary(func(p *pluginRow) string { return p.summary.ID }),
		}},
		TablePluginInstances: {Name: TablePluginInstances, Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: instanceKeyIndexer{}},
		}},
		// No index of volumes by plugin: every claim, release and
		// checkpoint rewrites its volume, and memdb re-inserts the row in
		// every index on each write (a path copy per index), while listing
		// a plugin's volumes is an operator's read that a scan serves.
		TableVolumes: {Name: TableVolumes, Indexes: map[string]*memdb.IndexSchema{
			indexID: primary(func(v *structs.Volume) string { return v.ID }),
			indexClaimNode: {Name: indexClaimNode, AllowMissing: true,
				Indexer: claimNodeIndexer{}},
			indexPendingSince: {Name: indexPendingSince, AllowMissing: true,
				Indexer: pendingSinceIndexer{}},
			indexFenceFailed: fenceFailedSchema(), // fence_failures.go
		}},
		TableAllocs: {Name: TableAllocs, Indexes: map[string]*memdb.IndexSchema{
			indexID:   primary(func(a *structs.Alloc) string { return a.ID }),
			indexNode: secondary(indexNode, func(a *structs.Alloc) string { return a.NodeID }),
		}},
		TableStorageReports: {Name: TableStorageReports, Indexes: map[string]*memdb.IndexSchema{
			indexID: primary(func(r *structs.StorageReport) string { return r.PluginID }),
		}},
		TableControllerAdmissions: admissionsSchema(),
		TableACLPolicies: {Name: TableACLPolicies, Indexes: map[string]*memdb.IndexSchema{
			indexID: primary(func(p *structs.ACLPolicy) string { return p.Name }),
		}},
		TableNodeIdentities: nodeIdentitySchema(),
		TableACLTokens: {Name: TableACLTokens, Indexes: map[string]*memdb.IndexSchema{
			indexID: primary(func(t *structs.ACLToken) string { return t.AccessorID }),
			indexSecret: unique(secondary(indexSecret, func(t *structs.ACLToken) string {
				return secretKey(t.SecretID)
			})),
		}},
	}}
}

func primary[T any](field func(*T) string) *memdb.IndexSchema {
	return unique(secondary(indexID, field))
}

func unique(s *memdb.IndexSchema) *memdb.IndexSchema {
	s.Unique = true
	return s
}

func secondary[T any](name string, field func(*T) string) *memdb.IndexSchema {
	return &memdb.IndexSchema{Name: name, Indexer: stringIndexer[T]{name: name, field: field}}
}

// stringIndexer indexes rows of type *T by one string field, read through
// a typed accessor. Its keys are the bytes memdb.StringFieldIndex makes
// (the string and a 0 byte; an empty field is not indexed), without the
// reflection that indexer does on every row and argument: every claim
// writes a volume and an eval through several indexes on every server, and
// the reflection was about a tenth of an apply's allocations.
type stringIndexer[T any] struct {
	name  string
	field func(*T) string
}

func (x stringIndexer[T]) FromObject(raw any) (bool, []byte, error) {
	row, ok := raw.(*T)
	if !ok {
		return false, nil, fmt.Errorf("%s index: %T is not a %T", x.name, raw, row)
	}
	s := x.field(row)
	if s == "" {
		return false, nil, nil
	}
	return true, nulTerminated(s), nil
}

func (x stringIndexer[T]) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("%s index: want 1 argument, got %d", x.name, len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("%s index: argument %T is not a string", x.name, args[0])
	}
	return nulTerminated(s), nil
}

// nulTerminated is s and a 0 byte, so that no key is a prefix of another
// ("n1" of "n10") and an exact lookup cannot match a longer key.
func nulTerminated(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
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
	// A volume has a claim or two, so a sorted slice dedupes more cheaply
	// than a set; sorted also keeps the keys in the same order each time,
	// so an update that keeps a volume's nodes deletes none of its keys.
	nodes := make([]string, 0, len(v.WriteClaims)+len(v.ReadClaims)+len(v.PastClaims))
	for _, m := range []map[string]*structs.Claim{v.WriteClaims, v.ReadClaims, v.PastClaims} {
		for _, c := range m {
			nodes = append(nodes, c.NodeID)
		}
	}
	if len(nodes) == 0 {
		return false, nil, nil
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	out := make([][]byte, len(nodes))
	for i, n := range nodes {
		out[i] = nulTerminated(n)
	}
	return true, out, nil
}

func (claimNodeIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("claim_node index: want 1 argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("claim_node index: argument %T is not a string", args[0])
	}
	return nulTerminated(s), nil
}

// pendingSinceIndexer keys a volume with a pending eval by that eval's
// ModifyIndex, big-endian so that byte order is numeric order and
// LowerBound is a range scan (memdb's UintFieldIndex uses uvarints, which
// do not sort). Volumes without one are left out of the index.
type pendingSinceIndexer struct{}

func (pendingSinceIndexer) FromObject(raw any) (bool, []byte, error) {
	v, ok := raw.(*structs.Volume)
	if !ok {
		return false, nil, fmt.Errorf("pending_since index: %T is not a volume", raw)
	}
	e := pendingEval(v)
	if e == nil {
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
