package fsm

import (
	"fmt"
	"maps"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.VolumeModifiedRequestType, applyVolumeModified)
}

// applyVolumeModified records the mutable parameters a plugin set, merged
// over those recorded before. As with a capacity, a volume replaced by
// another storage object since the call began is refused: the change
// belongs to the old one.
func applyVolumeModified(tx *txn, req *structs.VolumeModifiedRequest) (any, error) {
	check := &structs.VolumeModifyRequest{VolumeID: req.VolumeID, MutableParameters: req.MutableParameters}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	old := getVolume(tx, req.VolumeID)
	if old == nil {
		return nil, structs.NotFound("volume", req.VolumeID)
	}
	if old.ExternalID != req.ExternalID {
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"external_id: volume %q is now %q, not the %q that was modified", req.VolumeID, old.ExternalID, req.ExternalID))
	}
	v := *old
	v.MutableParameters = maps.Clone(old.MutableParameters)
	if v.MutableParameters == nil {
		v.MutableParameters = map[string]string{}
	}
	maps.Copy(v.MutableParameters, req.MutableParameters)
	v.ModifyIndex = tx.index
	tx.put(TableVolumes, &v)
	return nil, nil
}
