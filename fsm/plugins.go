package fsm

import (
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// The plugins table holds one pluginRow per plugin: the summary fields
// only. Each instance (a plugin's controller or node on one node) is its
// own row of TablePluginInstances, keyed plugin, kind, node, so that a
// node's change rewrites its own instances and adjusts the summary by
// their difference: O(log N) in the plugin's N instances, where a plugin
// row holding every instance cost a copy and three sorts of all N on each
// node register (58% of a new leader's CPU when 5,000 nodes re-register).
// Readers outside the FSM see structs.Plugin with its instance maps,
// assembled from the rows (see pluginRow.assembled).
//
// The instance table is not in the index table: it is written only with
// its plugin row, whose table index moves, and that is what blocking
// queries on plugins watch.

// Instance kinds, as key bytes: controllers sort before nodes, the order
// in which provider details are looked for (admitted controllers only:
// see plugin_admission.go).
const (
	instController = 'c'
	instNode       = 'n'
)

// pluginRow is a plugin's summary: the structs.Plugin fields without the
// instance maps, and what keeps them current without visiting every
// instance.
type pluginRow struct {
	summary structs.Plugin // Controllers and Nodes always nil
	// Instance counts, and how many instances require a controller.
	controllers, nodes, requiring int
	// healthyAny counts healthy controllers, admitted or not: what the
	// claim check (schedulable) reads. Admissions do not change which
	// claims the state machine takes, so that a server that predates
	// them, during a rolling upgrade, takes the same ones (decisions of
	// the log must not depend on the version applying it); a claim whose
	// plugin has only pending controllers fails at its ControllerPublish,
	// which goes to admitted controllers only (attachment.controllerTargets).
	healthyAny int
	// Keys of the instances the provider details and the capabilities
	// come from: the first instance, in key order, that reports them
	// ("" when none does). A controller instance that is not admitted is
	// never a source: whoever registers a node with a client certificate
	// may add one, and one that sorts first must not redefine the plugin
	// (its provider, what snapshots and expansion are checked against)
	// for everyone. The provider comes from an admitted controller, or
	// failing that from a node instance.
	providerKey, controllerCapsKey, nodeCapsKey string
	// full is the structs.Plugin readers get, built on the first read.
	// A row is immutable once committed and every instance change writes
	// a new row, so any read transaction that sees this row sees the
	// same instances.
	full *assembledPlugin
}

type assembledPlugin struct {
	once sync.Once
	p    *structs.Plugin
}

// pluginInstance is one instance: a node's fingerprint of a plugin, with
// Healthy already false when the node is not ready.
type pluginInstance struct {
	key    string // instanceKey(pluginID, kind, nodeID)
	nodeID string
	kind   byte
	info   *structs.CSIInfo
	// admitted: a controller instance with an admission (always false
	// for node instances), as of when the instance was last written;
	// every admission change rewrites the instance.
	admitted bool
}

// instanceKey orders a plugin's instances by kind, then node ID. The 0
// bytes keep one plugin's (and one node's) keys from being a prefix of
// another's: "p1" of "p10", "n1" of "n10".
func instanceKey(pluginID string, kind byte, nodeID string) string {
	return pluginPrefix(pluginID) + string(kind) + nodeID + "\x00"
}

func pluginPrefix(pluginID string) string { return pluginID + "\x00" }

// instanceKeyIndexer indexes instances by their key, and finds them by a
// whole key or (as id_prefix) by a plugin's or a plugin kind's prefix.
type instanceKeyIndexer struct{}

func (instanceKeyIndexer) FromObject(raw any) (bool, []byte, error) {
	i, ok := raw.(*pluginInstance)
	if !ok {
		return false, nil, fmt.Errorf("plugin instance index: %T is not a plugin instance", raw)
	}
	return true, []byte(i.key), nil
}

func (instanceKeyIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("plugin instance index: want 1 argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("plugin instance index: argument %T is not a string", args[0])
	}
	return []byte(s), nil
}

func (x instanceKeyIndexer) PrefixFromArgs(args ...any) ([]byte, error) {
	return x.FromArgs(args...)
}

// syncPlugins brings the plugin tables in line with one node's change:
// old is the node before the entry (nil when new), now after it (nil when
// deregistered). Only the plugins either version mentions are touched. A
// plugin left without instances is deleted: plugins are derived state and
// hold nothing that the nodes do not.
func syncPlugins(tx *txn, nodeID string, old, now *structs.Node) {
	var ids []string
	for _, n := range []*structs.Node{old, now} {
		if n == nil {
			continue
		}
		ids = append(ids, structs.SortedKeys(n.CSINodePlugins)...)
		ids = append(ids, structs.SortedKeys(n.CSIControllerPlugins)...)
	}
	for _, id := range sortedUnique(ids) {
		stored := getPluginRow(tx, id)
		var r pluginRow
		if stored != nil {
			r = *stored
		} else {
			r.summary = structs.Plugin{ID: id, CreateIndex: tx.index}
		}
		var ctrl, node *structs.CSIInfo
		if now != nil {
			ctrl, node = now.CSIControllerPlugins[id], now.CSINodePlugins[id]
		}
		setInstance(tx, &r, instController, nodeID, now, ctrl)
		setInstance(tx, &r, instNode, nodeID, now, node)
		if r.controllers+r.nodes == 0 {
			if stored != nil {
				tx.remove(TablePlugins, stored)
			}
			continue
		}
		r.summarize(tx.Txn)
		r.summary.ModifyIndex = tx.index
		r.full = &assembledPlugin{}
		tx.put(TablePlugins, &r)
	}
	if now == nil {
		dropNodeAdmissions(tx, nodeID)
	}
}

// setInstance replaces one instance (info nil: removes it) and adjusts the
// row's counts and source keys by the difference. The instance is healthy
// only when the fingerprint is and the node is ready: a plugin on a down
// node cannot serve anything.
func setInstance(tx *txn, r *pluginRow, kind byte, nodeID string, n *structs.Node, info *structs.CSIInfo) {
	key := instanceKey(r.summary.ID, kind, nodeID)
	was, _ := tx.get(TablePluginInstances, indexID, key).(*pluginInstance)
	if was != nil {
		r.count(was, -1)
		if info == nil {
			mustDelete(tx.Txn, TablePluginInstances, was)
		}
	}
	var inst *pluginInstance
	if info != nil { // an insert replaces the old row in place
		c := info.Copy()
		if n.Status != structs.NodeStatusReady && c.Healthy {
			c.Healthy = false
			c.HealthDescription = "node " + string(n.Status)
		}
		inst = &pluginInstance{key: key, nodeID: nodeID, kind: kind, info: c,
			admitted: kind == instController && getAdmission(tx.Txn, r.summary.ID, nodeID) != nil}
		r.count(inst, +1)
		mustInsert(tx.Txn, TablePluginInstances, inst)
	}
	prefix := pluginPrefix(r.summary.ID)
	r.providerKey = nextSource(tx.Txn, r.providerKey, key, inst, prefix, hasProvider)
	r.controllerCapsKey = nextSource(tx.Txn, r.controllerCapsKey, key, inst, prefix+string(instController), hasControllerCaps)
	r.nodeCapsKey = nextSource(tx.Txn, r.nodeCapsKey, key, inst, prefix+string(instNode), hasNodeCaps)
}

// count adds (sign +1) or takes away (-1) one instance's share of the
// counts.
func (r *pluginRow) count(i *pluginInstance, sign int) {
	if i.kind == instController {
		r.controllers += sign
		if i.info.Healthy {
			r.healthyAny += sign
		}
		switch {
		case !i.admitted:
			r.summary.ControllersPending += sign
		case i.info.Healthy:
			r.summary.ControllersHealthy += sign
		}
	} else {
		r.nodes += sign
		if i.info.Healthy {
			r.summary.NodesHealthy += sign
		}
	}
	if i.info.RequiresControllerPlugin {
		r.requiring += sign
	}
}

// A pending controller is no source of anything (see pluginRow).
func hasProvider(i *pluginInstance) bool {
	return i.info.Provider != "" && (i.kind != instController || i.admitted)
}
func hasControllerCaps(i *pluginInstance) bool {
	return i.admitted && i.info.ControllerCapabilities != nil
}
func hasNodeCaps(i *pluginInstance) bool { return i.info.NodeCapabilities != nil }

// nextSource is the key of the first instance under prefix that has what
// ok looks for, given that it was src before the instance at key became
// now (nil: removed). Only a change at or before src can move it, and only
// the source itself losing it needs a walk, which stops at the first
// instance that has it: typically the next one. (A walk from an admitted
// controller passes over the pending ones after it: only the source's own
// node leaving or changing, or an operator's revoke, starts one; a pending
// controller registering never does.)
func nextSource(tx *memdb.Txn, src, key string, now *pluginInstance, prefix string, ok func(*pluginInstance) bool) string {
	if !strings.HasPrefix(key, prefix) {
		return src
	}
	has := now != nil && ok(now)
	switch {
	case src == "" || key < src:
		if has {
			return key
		}
		return src
	case key > src:
		return src
	case has:
		return src
	}
	return firstSource(tx, src, prefix, ok)
}

// firstSource walks the instances under prefix from key on and returns the
// first that has what ok looks for.
func firstSource(tx *memdb.Txn, from, prefix string, ok func(*pluginInstance) bool) string {
	it, err := tx.LowerBound(TablePluginInstances, indexID, from)
	if err != nil {
		panic("fsm: read plugin instances: " + err.Error())
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		i := raw.(*pluginInstance)
		if !strings.HasPrefix(i.key, prefix) {
			break
		}
		if ok(i) {
			return i.key
		}
	}
	return ""
}

// summarize sets the summary fields the counts and source keys stand for.
func (r *pluginRow) summarize(tx *memdb.Txn) {
	p := &r.summary
	p.ControllerRequired = r.requiring > 0
	p.Provider, p.ProviderVersion = "", ""
	if i := getInstance(tx, r.providerKey); i != nil {
		p.Provider, p.ProviderVersion = i.info.Provider, i.info.ProviderVersion
	}
	p.ControllerCapabilities, p.NodeCapabilities = nil, nil
	if i := getInstance(tx, r.controllerCapsKey); i != nil {
		p.ControllerCapabilities = i.info.ControllerCapabilities.Copy()
	}
	if i := getInstance(tx, r.nodeCapsKey); i != nil {
		p.NodeCapabilities = i.info.NodeCapabilities.Copy()
	}
}

func getInstance(tx *memdb.Txn, key string) *pluginInstance {
	if key == "" {
		return nil
	}
	raw, err := tx.First(TablePluginInstances, indexID, key)
	if err != nil {
		panic("fsm: read plugin instance: " + err.Error())
	}
	i, _ := raw.(*pluginInstance)
	return i
}

// plugin returns the structs.Plugin readers see, with its instance maps.
// Inside a write transaction (cached false) it is built afresh, since the
// transaction may have changed instances the row does not yet reflect;
// a read transaction builds it once per row.
func (r *pluginRow) plugin(tx *memdb.Txn, cached bool) *structs.Plugin {
	if !cached || r.full == nil {
		return r.build(tx)
	}
	r.full.once.Do(func() { r.full.p = r.build(tx) })
	return r.full.p
}

func (r *pluginRow) build(tx *memdb.Txn) *structs.Plugin {
	p := r.summary
	if r.controllers > 0 {
		p.Controllers = make(map[string]*structs.CSIInfo, r.controllers)
	}
	if r.nodes > 0 {
		p.Nodes = make(map[string]*structs.CSIInfo, r.nodes)
	}
	it, err := tx.Get(TablePluginInstances, indexID+"_prefix", pluginPrefix(p.ID))
	if err != nil {
		panic("fsm: read plugin instances: " + err.Error())
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		i := raw.(*pluginInstance)
		if i.kind == instController {
			p.Controllers[i.nodeID] = i.info
		} else {
			p.Nodes[i.nodeID] = i.info
		}
	}
	p.Admissions = pluginAdmissions(tx, p.ID)
	return &p
}

// schedulable is structs.Plugin.Schedulable for the FSM, reading only the
// summary and the one node's instance.
func schedulable(tx *txn, pluginID, nodeID string) (bool, string) {
	r := getPluginRow(tx, pluginID)
	if r == nil {
		return (*structs.Plugin)(nil).Schedulable(nodeID)
	}
	p := r.summary
	p.ControllersHealthy = r.healthyAny // see pluginRow.healthyAny
	if i := getInstance(tx.Txn, instanceKey(pluginID, instNode, nodeID)); i != nil {
		p.Nodes = map[string]*structs.CSIInfo{nodeID: i.info}
	}
	return p.Schedulable(nodeID)
}

// restorePlugin stores a plugin read from a snapshot, which carries the
// assembled structs.Plugin: its instances become rows, admitted as the
// admissions table (restored before the plugins) says, and the summary is
// derived from them as the entries would have: a snapshot written before
// admissions existed has every controller pending. Admissions in the
// record itself are the table's, already restored.
func restorePlugin(tx *memdb.Txn, p *structs.Plugin) {
	r := &pluginRow{summary: *p, full: &assembledPlugin{}}
	r.summary.Controllers, r.summary.Nodes, r.summary.Admissions = nil, nil, nil
	r.summary.ControllersHealthy, r.summary.NodesHealthy, r.summary.ControllersPending = 0, 0, 0
	for kind, m := range map[byte]map[string]*structs.CSIInfo{instController: p.Controllers, instNode: p.Nodes} {
		for nodeID, info := range m {
			i := &pluginInstance{key: instanceKey(p.ID, kind, nodeID), nodeID: nodeID, kind: kind, info: info,
				admitted: kind == instController && getAdmission(tx, p.ID, nodeID) != nil}
			mustInsert(tx, TablePluginInstances, i)
			r.count(i, +1)
		}
	}
	prefix := pluginPrefix(p.ID)
	r.providerKey = firstSource(tx, prefix, prefix, hasProvider)
	r.controllerCapsKey = firstSource(tx, prefix+string(instController), prefix+string(instController), hasControllerCaps)
	r.nodeCapsKey = firstSource(tx, prefix+string(instNode), prefix+string(instNode), hasNodeCaps)
	r.summarize(tx)
	mustInsert(tx, TablePlugins, r)
}

func mustInsert(tx *memdb.Txn, table string, obj any) {
	if err := tx.Insert(table, obj); err != nil {
		panic("fsm: insert into " + table + ": " + err.Error())
	}
}

func mustDelete(tx *memdb.Txn, table string, obj any) {
	if err := tx.Delete(table, obj); err != nil {
		panic("fsm: delete from " + table + ": " + err.Error())
	}
}
