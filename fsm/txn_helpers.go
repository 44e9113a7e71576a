package fsm

import "github.com/claimd/claimd/structs"

// Typed reads inside a write transaction. They return stored objects:
// callers Copy before changing anything.

func getVolume(tx *txn, id string) *structs.Volume {
	v, _ := tx.get(TableVolumes, indexID, id).(*structs.Volume)
	return v
}

func getNode(tx *txn, id string) *structs.Node {
	n, _ := tx.get(TableNodes, indexID, id).(*structs.Node)
	return n
}

func getPluginRow(tx *txn, id string) *pluginRow {
	p, _ := tx.get(TablePlugins, indexID, id).(*pluginRow)
	return p
}

func getAlloc(tx *txn, id string) *structs.Alloc {
	a, _ := tx.get(TableAllocs, indexID, id).(*structs.Alloc)
	return a
}

func getEval(tx *txn, id string) *structs.Eval {
	e, _ := tx.get(TableEvals, indexID, id).(*structs.Eval)
	return e
}

func evalsOfVolume(tx *txn, volumeID string) []*structs.Eval {
	raws := tx.all(TableEvals, indexVolume, volumeID)
	out := make([]*structs.Eval, len(raws))
	for i, raw := range raws {
		out[i] = raw.(*structs.Eval)
	}
	return out
}
