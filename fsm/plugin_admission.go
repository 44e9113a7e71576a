package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// Controller admissions (issue 38). A controller instance is sent calls
// only once admitted; the admissions live in their own table, keyed
// plugin then node, because they are the operator's (or the registering
// server's) decision and outlive fingerprints: a controller that stops
// and comes back keeps its admission. A node's deregistration drops its
// admissions, so an ID that is registered anew starts pending.
//
// Each instance row carries its admitted flag (pluginInstance.admitted),
// set from this table whenever the instance is written, so the plugin
// summary (counts, provider, capabilities) follows admissions with the
// same O(log N) bookkeeping as fingerprints (plugins.go).

// TableControllerAdmissions holds structs.ControllerAdmission rows.
const TableControllerAdmissions = "controller_admissions"

func init() {
	registerCommand(structs.PluginAdmitControllerRequestType, applyAdmitController)
	registerCommand(structs.PluginRevokeControllerRequestType, applyRevokeController)
}

func admissionKey(pluginID, nodeID string) string { return pluginPrefix(pluginID) + nodeID + "\x00" }

func admissionsSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableControllerAdmissions, Indexes: map[string]*memdb.IndexSchema{
		indexID:   {Name: indexID, Unique: true, Indexer: admissionKeyIndexer{}},
		indexNode: secondary(indexNode, func(a *structs.ControllerAdmission) string { return a.NodeID }),
	}}
}

// admissionKeyIndexer indexes admissions by plugin, then node, and finds
// a plugin's by its prefix (as id_prefix).
type admissionKeyIndexer struct{}

func (admissionKeyIndexer) FromObject(raw any) (bool, []byte, error) {
	a, ok := raw.(*structs.ControllerAdmission)
	if !ok {
		return false, nil, fmt.Errorf("admission index: %T is not a controller admission", raw)
	}
	return true, []byte(admissionKey(a.PluginID, a.NodeID)), nil
}

func (admissionKeyIndexer) FromArgs(args ...any) ([]byte, error) {
	return instanceKeyIndexer{}.FromArgs(args...)
}

func (admissionKeyIndexer) PrefixFromArgs(args ...any) ([]byte, error) {
	return instanceKeyIndexer{}.FromArgs(args...)
}

func getAdmission(tx *memdb.Txn, pluginID, nodeID string) *structs.ControllerAdmission {
	raw, err := tx.First(TableControllerAdmissions, indexID, admissionKey(pluginID, nodeID))
	if err != nil {
		panic("fsm: read controller admission: " + err.Error())
	}
	a, _ := raw.(*structs.ControllerAdmission)
	return a
}

// applyAdmitController admits a controller the node advertises now: an
// operator admits what they can see pending, and a typo in either ID is
// an error rather than an admission waiting for whoever registers with
// that ID. Admitting an admitted controller changes nothing.
func applyAdmitController(tx *txn, req *structs.PluginAdmissionRequest) (any, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	n := getNode(tx, req.NodeID)
	if n == nil {
		return nil, structs.NotFound("node", req.NodeID)
	}
	if n.CSIControllerPlugins[req.PluginID] == nil {
		return nil, structs.Invalid("plugin_id", fmt.Sprintf("node %q does not run a controller of plugin %q", req.NodeID, req.PluginID))
	}
	if getAdmission(tx.Txn, req.PluginID, req.NodeID) != nil {
		return nil, nil
	}
	admit(tx, req.PluginID, n, structs.AdmittedByOperator)
	return nil, nil
}

// applyRevokeController takes an admission back: the controller is sent no
// more calls (calls under way finish).
func applyRevokeController(tx *txn, req *structs.PluginAdmissionRequest) (any, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	a := getAdmission(tx.Txn, req.PluginID, req.NodeID)
	if a == nil {
		return nil, structs.NewError(structs.CodeNotFound,
			fmt.Sprintf("the controller of plugin %q on node %q is not admitted", req.PluginID, req.NodeID))
	}
	tx.remove(TableControllerAdmissions, a)
	refreshController(tx, req.PluginID, getNode(tx, req.NodeID))
	return nil, nil
}

// admit stores an admission and brings the controller's instance in line.
func admit(tx *txn, pluginID string, n *structs.Node, source string) {
	tx.put(TableControllerAdmissions, &structs.ControllerAdmission{
		PluginID: pluginID, NodeID: n.ID, Source: source, CreateIndex: tx.index})
	refreshController(tx, pluginID, n)
}

// refreshController rewrites the node's controller instance of the plugin
// (its admitted flag) and the plugin row, whose table index then moves so
// blocking queries on plugins see the change. n nil, or a node that no
// longer runs the controller: only the row is rewritten.
func refreshController(tx *txn, pluginID string, n *structs.Node) {
	stored := getPluginRow(tx, pluginID)
	if stored == nil {
		return
	}
	r := *stored
	if n != nil {
		setInstance(tx, &r, instController, n.ID, n, n.CSIControllerPlugins[pluginID])
	}
	r.summarize(tx.Txn)
	r.summary.ModifyIndex = tx.index
	r.full = &assembledPlugin{}
	tx.put(TablePlugins, &r)
}

// autoAdmitControllers admits every controller n advertises that is not
// admitted yet, when source says the registration needs no operator
// (structs.NodeRegisterRequest.AutoAdmit). Called by the node register
// apply before its plugins are synced, so the instances are written
// admitted at once.
func autoAdmitControllers(tx *txn, n *structs.Node, source string) {
	if n == nil || (source != structs.AdmittedByServerCert && source != structs.AdmittedByACLDisabled) {
		return // "" (pending), or a value no server writes
	}
	for _, id := range structs.SortedKeys(n.CSIControllerPlugins) {
		if getAdmission(tx.Txn, id, n.ID) == nil {
			tx.put(TableControllerAdmissions, &structs.ControllerAdmission{
				PluginID: id, NodeID: n.ID, Source: source, CreateIndex: tx.index})
		}
	}
}

// dropNodeAdmissions removes a departing node's admissions: an ID that
// registers again, whoever holds it, starts pending. Each plugin row is
// rewritten, since readers see its admissions (an admission may outlive
// the instance it was given for, so the node's plugins may not include
// the plugin).
func dropNodeAdmissions(tx *txn, nodeID string) {
	for _, raw := range tx.all(TableControllerAdmissions, indexNode, nodeID) {
		tx.remove(TableControllerAdmissions, raw)
		refreshController(tx, raw.(*structs.ControllerAdmission).PluginID, nil)
	}
}

// pluginAdmissions reads a plugin's admissions by node ID (nil: none).
func pluginAdmissions(tx *memdb.Txn, pluginID string) map[string]*structs.ControllerAdmission {
	it, err := tx.Get(TableControllerAdmissions, indexID+"_prefix", pluginPrefix(pluginID))
	if err != nil {
		panic("fsm: read controller admissions: " + err.Error())
	}
	var out map[string]*structs.ControllerAdmission
	for raw := it.Next(); raw != nil; raw = it.Next() {
		a := raw.(*structs.ControllerAdmission)
		if out == nil {
			out = map[string]*structs.ControllerAdmission{}
		}
		out[a.NodeID] = a
	}
	return out
}

// ControllerAdmissions lists every admission, by plugin then node.
func (s *StateStore) ControllerAdmissions(ws memdb.WatchSet) ([]*structs.ControllerAdmission, error) {
	return listAs[structs.ControllerAdmission](s.list(ws, TableControllerAdmissions, indexID))
}
