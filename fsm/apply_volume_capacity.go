package fsm

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.VolumeCapacityRequestType, applyVolumeCapacity)
}

// applyVolumeCapacity records a volume's grown size. It only ever raises
// the capacity: the plugin never shrinks a volume, so a smaller value is
// an older expansion that finished late, and keeping the larger one is
// what the storage has. A volume replaced by another storage object since
// the expansion began (another external ID) is refused: the size belongs
// to the old one.
func applyVolumeCapacity(tx *txn, req *structs.VolumeCapacityRequest) (any, error) {
	if err := structs.ValidateID("volume_id", req.VolumeID); err != nil {
		return nil, err
	}
	if req.Capacity <= 0 {
		return nil, structs.Invalid("capacity", fmt.Sprintf("%d must be positive", req.Capacity))
	}
	old := getVolume(tx, req.VolumeID)
	if old == nil {
		return nil, structs.NotFound("volume", req.VolumeID)
	}
	if old.ExternalID != req.ExternalID {
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"external_id: volume %q is now %q, not the %q that was expanded", req.VolumeID, old.ExternalID, req.ExternalID))
	}
	if req.Capacity <= old.Capacity {
		return old.Capacity, nil
	}
	// The stored claims are immutable, so the new row may share them
	// (as applyVolumeRegister does).
	v := *old
	v.Capacity = req.Capacity
	v.ModifyIndex = tx.index
	tx.put(TableVolumes, &v)
	return v.Capacity, nil
}
