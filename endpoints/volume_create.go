package endpoints

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

// Create has a controller plugin make a volume and registers it. The leader
// serves it: it checks the spec and the plugin's capabilities before any
// call, picks a controller as publish does (ClientCSI.controllerCall), and
// registers the plugin's answer in one entry. claimd's volume ID is the
// CSI name, so a retry after a lost answer or under a new leader gets the
// same plugin volume back (CSI CreateVolume is idempotent by name).
func (v *Volume) Create(args *structs.VolumeCreateRequest, reply *structs.VolumeCreateResponse) error {
	if done, err := v.srv.Forward("Volume.Create", args, args, reply); done {
		return err
	}
	if _, err := v.auth.check("Volume.Create", args); err != nil {
		return err
	}
	spec := args.Volume
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := v.checkCreatable(spec); err != nil {
		return err
	}
	existing, err := v.srv.State().VolumeByID(nil, spec.ID)
	if err != nil {
		return err
	}
	if existing != nil {
		// A repeat of a create that was registered (or a volume registered
		// by hand): answer from the state without calling the plugin, so a
		// mismatch never leaves a plugin volume nobody registered.
		if err := sameAsCreated(existing, spec); err != nil {
			return err
		}
		reply.Volume = existing.Sanitize()
		reply.Index = existing.ModifyIndex
		return nil
	}

	var created structs.ClientCSIControllerCreateResponse
	err = NewClientCSI(v.srv).ControllerCreateVolume(&structs.ClientCSIControllerCreateRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: spec.PluginID},
		Name:               spec.ID, CapacityMin: spec.CapacityMin, CapacityMax: spec.CapacityMax,
		Capabilities: spec.Capabilities, MountOptions: spec.MountOptions, Parameters: spec.Parameters,
		Secrets: spec.Secrets, Topology: spec.Topology, SnapshotID: spec.SnapshotID, CloneID: spec.CloneID,
	}, &created)
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("create volume %q with plugin %q", spec.ID, spec.PluginID))
	}
	vol := spec.Volume(created.ExternalID, created.Capacity, created.Context, created.AccessibleTopology)
	if err := vol.Validate(); err != nil {
		return structs.Wrap(err, fmt.Sprintf("plugin %q created volume %q (external ID %q), but its answer cannot be registered",
			spec.PluginID, spec.ID, created.ExternalID))
	}
	_, index, err := v.srv.Apply(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol}})
	if err != nil {
		return err
	}
	v.srv.Logger().Info("volume created", "volume", spec.ID, "plugin", spec.PluginID, "external_id", created.ExternalID,
		"capacity", created.Capacity, "controller", created.ControllerNodeID, "index", index)
	reply.Volume = vol.Sanitize()
	reply.Volume.CreateIndex, reply.Volume.ModifyIndex = index, index
	reply.Index = index
	return nil
}

// sameAsCreated reports, as a conflict naming the field, how a registered
// volume differs from what a create spec for the same ID asks for.
func sameAsCreated(v *structs.Volume, spec *structs.VolumeCreateSpec) error {
	conflict := func(field, msg string) error {
		return structs.NewError(structs.CodeConflict, fmt.Sprintf("%s: volume %q is already registered %s", field, spec.ID, msg))
	}
	first := spec.Capabilities[0]
	switch {
	case v.PluginID != spec.PluginID:
		return conflict("plugin_id", fmt.Sprintf("with plugin %q", v.PluginID))
	case v.AccessMode != first.AccessMode || v.AttachmentMode != first.AttachmentMode:
		return conflict("capabilities[0]", fmt.Sprintf("with %s/%s", v.AccessMode, v.AttachmentMode))
	case v.Capacity < spec.CapacityMin || (spec.CapacityMax > 0 && v.Capacity > spec.CapacityMax):
		return conflict("capacity_min", fmt.Sprintf("with capacity %d, outside [%d, %d]", v.Capacity, spec.CapacityMin, spec.CapacityMax))
	}
	return nil
}

// checkCreatable refuses, before any plugin call, a spec the plugin cannot
// serve, naming the field that asks for what it lacks.
func (v *Volume) checkCreatable(spec *structs.VolumeCreateSpec) error {
	plug, err := v.srv.State().PluginByID(nil, spec.PluginID)
	if err != nil {
		return err
	}
	if plug == nil {
		return structs.NotFound("plugin", spec.PluginID)
	}
	caps := plug.ControllerCapabilities
	if caps == nil || !caps.CreateDeleteVolume {
		return structs.Invalid("plugin_id", fmt.Sprintf("plugin %q does not advertise the CREATE_DELETE_VOLUME controller capability", spec.PluginID))
	}
	if spec.SnapshotID != "" && !caps.CreateDeleteSnapshot {
		return structs.Invalid("snapshot_id", fmt.Sprintf("plugin %q does not advertise the CREATE_DELETE_SNAPSHOT controller capability", spec.PluginID))
	}
	if spec.CloneID != "" && !caps.CloneVolume {
		return structs.Invalid("clone_id", fmt.Sprintf("plugin %q does not advertise the CLONE_VOLUME controller capability", spec.PluginID))
	}
	return nil
}

// Delete has a controller plugin delete a volume's storage and then
// deregisters it. A volume with any claim, live or past, is refused: a node
// may still have it attached. A plugin error leaves the volume registered.
func (v *Volume) Delete(args *structs.VolumeDeleteRequest, reply *structs.GenericResponse) error {
	if done, err := v.srv.Forward("Volume.Delete", args, args, reply); done {
		return err
	}
	if _, err := v.auth.check("Volume.Delete", args); err != nil {
		return err
	}
	if err := structs.ValidateID("volume_id", args.VolumeID); err != nil {
		return err
	}
	vol, err := v.srv.State().VolumeByID(nil, args.VolumeID)
	if err != nil {
		return err
	}
	if vol == nil {
		return structs.NotFound("volume", args.VolumeID)
	}
	if vol.HasClaims() {
		return structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"volume %q has %d live and %d past claims; delete it once they are released",
			vol.ID, len(vol.ReadClaims)+len(vol.WriteClaims), len(vol.PastClaims)))
	}
	plug, err := v.srv.State().PluginByID(nil, vol.PluginID)
	if err != nil {
		return err
	}
	if plug != nil && (plug.ControllerCapabilities == nil || !plug.ControllerCapabilities.CreateDeleteVolume) {
		return structs.Invalid("plugin_id", fmt.Sprintf("plugin %q does not advertise the CREATE_DELETE_VOLUME controller capability; "+
			"`volume deregister` forgets the volume without deleting it", vol.PluginID))
	}
	var out structs.ClientCSIControllerDeleteResponse
	err = NewClientCSI(v.srv).ControllerDeleteVolume(&structs.ClientCSIControllerDeleteRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
		VolumeID:           vol.ID, ExternalID: vol.ExternalID, Secrets: vol.Secrets,
	}, &out)
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("delete volume %q (external ID %q) with plugin %q; the volume stays registered",
			vol.ID, vol.ExternalID, vol.PluginID))
	}
	// Without Force the state machine refuses if a claim arrived meanwhile;
	// the storage is gone then, and the refusal says so.
	_, index, err := v.srv.Apply(structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{vol.ID}})
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("plugin %q deleted volume %q, but deregistering it failed", vol.PluginID, vol.ID))
	}
	v.srv.Logger().Info("volume deleted", "volume", vol.ID, "plugin", vol.PluginID, "external_id", vol.ExternalID,
		"controller", out.ControllerNodeID, "index", index)
	reply.Index = index
	return nil
}
