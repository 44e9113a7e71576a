package fsm

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.VolumeRegisterRequestType, applyVolumeRegister)
	registerCommand(structs.VolumeDeregisterRequestType, applyVolumeDeregister)
}

// applyVolumeRegister creates or updates volumes. Claims are state, not
// spec: an update keeps the stored claims and current modes whatever the
// request carries, and may change only what is safe while a node has the
// volume attached. A known capacity is state too (decision 32).
func applyVolumeRegister(tx *txn, req *structs.VolumeRegisterRequest) (any, error) {
	if len(req.Volumes) == 0 {
		return nil, structs.Invalid("volumes", "must not be empty")
	}
	seen := make(map[string]bool, len(req.Volumes))
	for i, in := range req.Volumes {
		if err := in.Validate(); err != nil {
			return nil, itemError("volumes", i, err)
		}
		if seen[in.ID] {
			return nil, structs.Invalid(fmt.Sprintf("volumes[%d].id", i), fmt.Sprintf("%q is given twice", in.ID))
		}
		seen[in.ID] = true

		v := in.Copy()
		v.ReadClaims, v.WriteClaims, v.PastClaims = nil, nil, nil
		// The release history is the servers' record, never the spec's.
		v.Released, v.Repairs, v.MutableParameters, v.Evals = nil, nil, nil, nil
		v.FenceFailures = nil // the nodes' word, never the spec's (fence_failures.go)
		v.CurrentAccessMode, v.CurrentAttachmentMode = "", ""
		v.CreateIndex, v.ModifyIndex = tx.index, tx.index
		if old := getVolume(tx, in.ID); old != nil {
			if err := checkClaimedUpdate(old, v); err != nil {
				return nil, err
			}
			// The stored claims are immutable; sharing them between the
			// old and new row is safe, and copying would make updating a
			// busy volume cost O(claims).
			v.ReadClaims, v.WriteClaims, v.PastClaims = old.ReadClaims, old.WriteClaims, old.PastClaims
			v.CurrentAccessMode, v.CurrentAttachmentMode = old.CurrentAccessMode, old.CurrentAttachmentMode
			v.Released, v.Repairs, v.Evals = old.Released, old.Repairs, old.Evals
			// A re-registration does not stop a writer a failed fence left.
			v.FenceFailures = old.FenceFailures
			// Mutable parameters change only through a modification the
			// plugin did, for the same storage object.
			v.MutableParameters = nil
			if old.ExternalID == v.ExternalID && old.PluginID == v.PluginID {
				v.MutableParameters = old.MutableParameters
			}
			v.CreateIndex = old.CreateIndex
			// A known size of the same storage object changes only through
			// the capacity entry, once the plugin grew it: the register
			// spec's size is what the endpoint asked the plugin for, which
			// happens after this entry, and a smaller or missing one must
			// not undo an expansion.
			if old.Capacity > 0 && old.PluginID == v.PluginID && old.ExternalID == v.ExternalID {
				v.Capacity = old.Capacity
			}
		}
		tx.put(TableVolumes, v)
	}
	return nil, nil
}

// checkClaimedUpdate refuses changing what a node with the volume attached
// depends on: which plugin and which storage object it is, and how it is
// accessed. Names, parameters, context, secrets and mount options only
// matter to the next publish and may change.
func checkClaimedUpdate(old, v *structs.Volume) error {
	if !old.HasClaims() {
		return nil
	}
	for _, f := range []struct{ field, was, now string }{
		{"plugin_id", old.PluginID, v.PluginID},
		{"external_id", old.ExternalID, v.ExternalID},
		{"access_mode", string(old.AccessMode), string(v.AccessMode)},
		{"attachment_mode", string(old.AttachmentMode), string(v.AttachmentMode)},
	} {
		if f.was != f.now {
			return structs.NewError(structs.CodeConflict, fmt.Sprintf(
				"%s: cannot change from %q to %q while volume %q has claims", f.field, f.was, f.now, v.ID))
		}
	}
	return nil
}

// applyVolumeDeregister removes volumes. A claimed volume stays unless the
// request forces it and no claiming alloc can still be using it (every one
// is terminal or gone): forcing past a running alloc would pull storage out
// from under it. A removed volume's evals are deleted with it.
func applyVolumeDeregister(tx *txn, req *structs.VolumeDeregisterRequest) (any, error) {
	if len(req.VolumeIDs) == 0 {
		return nil, structs.Invalid("volume_ids", "must not be empty")
	}
	seen := make(map[string]bool, len(req.VolumeIDs))
	for i, id := range req.VolumeIDs {
		if seen[id] {
			return nil, structs.Invalid(fmt.Sprintf("volume_ids[%d]", i), fmt.Sprintf("%q is given twice", id))
		}
		seen[id] = true
		v := getVolume(tx, id)
		if v == nil {
			return nil, structs.NotFound("volume", id)
		}
		if v.HasClaims() {
			if !req.Force {
				return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
					"volume %q has %d claims; release them or deregister with force once their allocs are terminal",
					id, len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims)))
			}
			for _, c := range v.AllClaims() {
				if a := getAlloc(tx, c.AllocID); a != nil && !a.Terminal() {
					return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
						"volume %q: force refused, alloc %q is %s", id, a.ID, a.ClientStatus))
				}
			}
		}
		tx.remove(TableVolumes, v)
		if len(v.Evals) > 0 {
			// Its evals go with it (they live in its row, decision 41).
			tx.touched[TableEvals] = true
		}
	}
	return nil, nil
}
