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

// getEval returns an eval and the volume that holds it, or nil, nil.
func getEval(tx *txn, id string) (*structs.Eval, *structs.Volume) {
	ref, _ := tx.get(TableEvalIDs, indexID, id).(*evalRef)
	if ref == nil {
		return nil, nil
	}
	v := getVolume(tx, ref.VolumeID)
	if v == nil {
		return nil, nil
	}
	for _, e := range v.Evals {
		if e.ID == id {
			return e, v
		}
	}
	return nil, nil
}
