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

// getEval returns an eval and the volume that holds it, or nil, nil. With
// volumeID it reads that volume's row; without (an entry written before
// EvalCompleteRequest named the volume, or an upsert) it searches every
// volume: evals have no index of their own (decision 41).
func getEval(tx *txn, id, volumeID string) (*structs.Eval, *structs.Volume) {
	if volumeID != "" {
		v := getVolume(tx, volumeID)
		if v == nil {
			return nil, nil
		}
		return findEval(v, id), v
	}
	for _, raw := range tx.all(TableVolumes, indexID) {
		v := raw.(*structs.Volume)
		if e := findEval(v, id); e != nil {
			return e, v
		}
	}
	return nil, nil
}

func findEval(v *structs.Volume, id string) *structs.Eval {
	for _, e := range v.Evals {
		if e.ID == id {
			return e
		}
	}
	return nil
}
