package endpoints

import (
	"fmt"
	"sort"
	"strings"

	"github.com/claimd/claimd/structs"
)

// Create has a controller plugin make a volume and registers it. The leader
// serves it: it checks the spec and the plugin's capabilities before any
// call, picks a controller as publish does (ClientCSI.controllerCall), and
// registers the plugin's answer in one entry. claimd's volume ID is the
// CSI name, so a retry after a lost answer or under a new leader gets the
// same plugin volume back (CSI CreateVolume is idempotent by name).
func (v *Volume) Create(args *structs.VolumeCreateRequest, reply *structs.VolumeCreateResponse) error {
	_, done, err := v.auth.gate("Volume.Create", args, reply, nil)
	if done {
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
		// by hand): answer from the state without CreateVolume, so a
		// mismatch never leaves a plugin volume nobody registered. A
		// capacity_min above the recorded size grows the volume as
		// `volume expand` does.
		grow, err := sameAsCreated(existing, spec)
		if err != nil {
			return err
		}
		reply.Volume, reply.Index = existing.Sanitize(), existing.ModifyIndex
		if !grow {
			return nil
		}
		var grown structs.VolumeExpansion
		index, err := v.grow(existing, growth{capacity: spec.CapacityMin, limit: spec.CapacityMax,
			field: "capacity_min", capField: "capacity_min"}, &grown)
		if err != nil {
			return err
		}
		reply.Expanded, reply.Index = &grown, index
		if now, err := v.srv.State().VolumeByID(nil, spec.ID); err != nil {
			return err
		} else if now != nil {
			reply.Volume = now.Sanitize()
		}
		return nil
	}

	var created structs.ClientCSIControllerCreateResponse
	err = csiOf(v.srv).ControllerCreateVolume(&structs.ClientCSIControllerCreateRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: spec.PluginID},
		Name:               spec.ID, CapacityMin: spec.CapacityMin, CapacityMax: spec.CapacityMax,
		Capabilities: spec.Capabilities, MountOptions: spec.MountOptions, Parameters: spec.Parameters,
		Secrets: spec.Secrets, Topology: spec.Topology, SnapshotID: spec.SnapshotID, CloneID: spec.CloneID,
	}, &created)
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("create volume %q with plugin %q", spec.ID, spec.PluginID))
	}
	vol := spec.Volume(created.ExternalID, created.Capacity, created.Context, created.AccessibleTopology)
	if err := vol.ValidateEntry(); err != nil {
		return structs.Wrap(err, fmt.Sprintf("plugin %q created volume %q (external ID %q), but its answer cannot be registered",
			spec.PluginID, spec.ID, created.ExternalID))
	}
	_, index, err := v.srv.Apply(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol}})
	if err != nil {
		return err
	}
	v.srv.Logger.Info("volume created", "volume", spec.ID, "plugin", spec.PluginID, "external_id", created.ExternalID,
		"capacity", created.Capacity, "controller", created.ControllerNodeID, "index", index)
	reply.Volume = vol.Sanitize()
	reply.Volume.CreateIndex, reply.Volume.ModifyIndex = index, index
	reply.Index = index
	return nil
}

// sameAsCreated reports, as a conflict naming the field, how a registered
// volume differs from what a create spec for the same ID asks for, and
// whether the spec asks to grow it: a capacity_min above a known recorded
// size. An unknown size (a volume registered by hand without one) is not
// grown from: claimd cannot tell the request from what the storage has.
func sameAsCreated(v *structs.Volume, spec *structs.VolumeCreateSpec) (grow bool, err error) {
	conflict := func(field, msg string) error {
		return structs.NewError(structs.CodeConflict, fmt.Sprintf("%s: volume %q is already registered %s", field, spec.ID, msg))
	}
	first := spec.Capabilities[0]
	switch {
	case v.PluginID != spec.PluginID:
		return false, conflict("plugin_id", fmt.Sprintf("with plugin %q", v.PluginID))
	case v.AccessMode != first.AccessMode || v.AttachmentMode != first.AttachmentMode:
		return false, conflict("capabilities[0]", fmt.Sprintf("with %s/%s", v.AccessMode, v.AttachmentMode))
	case spec.CapacityMax > 0 && v.Capacity > spec.CapacityMax:
		return false, conflict("capacity_max", fmt.Sprintf("with capacity %d, more than %d; shrinking is not supported", v.Capacity, spec.CapacityMax))
	case v.Capacity == 0 && spec.CapacityMin > 0:
		return false, conflict("capacity_min", fmt.Sprintf("without a known capacity; `volume expand` grows it to at least %d", spec.CapacityMin))
	}
	return v.Capacity < spec.CapacityMin, nil
}

// checkCreatable refuses, before any plugin call, a spec the plugin cannot
// serve, naming the field that asks for what it lacks.
func (v *Volume) checkCreatable(spec *structs.VolumeCreateSpec) error {
	plug, err := v.plugin(spec.PluginID)
	if err != nil {
		return err
	}
	if err := needController(plug, "plugin_id", capCreateDeleteVolume); err != nil {
		return err
	}
	if spec.SnapshotID != "" {
		if err := needController(plug, "snapshot_id", capCreateDeleteSnapshot); err != nil {
			return err
		}
	}
	if spec.CloneID != "" {
		if err := needController(plug, "clone_id", capCloneVolume); err != nil {
			return err
		}
	}
	return nil
}

// plugin reads a plugin that a request names; unknown is not_found.
func (v *Volume) plugin(id string) (*structs.Plugin, error) {
	plug, err := v.srv.State().PluginByID(nil, id)
	if err != nil {
		return nil, err
	}
	if plug == nil {
		return nil, structs.NotFound("plugin", id)
	}
	return plug, nil
}

// controllerCap is one controller capability a request may need, by its
// CSI name.
type controllerCap struct {
	name string
	has  func(*structs.CSIControllerCapabilities) bool
}

var (
	capCreateDeleteVolume   = controllerCap{"CREATE_DELETE_VOLUME", func(c *structs.CSIControllerCapabilities) bool { return c.CreateDeleteVolume }}
	capCreateDeleteSnapshot = controllerCap{"CREATE_DELETE_SNAPSHOT", func(c *structs.CSIControllerCapabilities) bool { return c.CreateDeleteSnapshot }}
	capListSnapshots        = controllerCap{"LIST_SNAPSHOTS", func(c *structs.CSIControllerCapabilities) bool { return c.ListSnapshots }}
	capCloneVolume          = controllerCap{"CLONE_VOLUME", func(c *structs.CSIControllerCapabilities) bool { return c.CloneVolume }}
	capExpandVolume         = controllerCap{"EXPAND_VOLUME", func(c *structs.CSIControllerCapabilities) bool { return c.ExpandVolume }}
)

// hasController reports whether the plugin advertises a controller
// capability (not reported yet counts as not advertised).
func hasController(plug *structs.Plugin, need controllerCap) bool {
	return plug.ControllerCapabilities != nil && need.has(plug.ControllerCapabilities)
}

// needController is the one rule for every controller call claimd makes on
// an operator's behalf: refused before any call, as invalid naming field,
// when the plugin does not advertise the capability the call needs.
func needController(plug *structs.Plugin, field string, need controllerCap) *structs.CodedError {
	if hasController(plug, need) {
		return nil
	}
	return structs.Invalid(field, fmt.Sprintf("plugin %q does not advertise the %s controller capability", plug.ID, need.name))
}

// Delete has a controller plugin delete a volume's storage and then
// deregisters it. A volume with any claim, live or past, is refused: a node
// may still have it attached. A plugin error leaves the volume registered.
func (v *Volume) Delete(args *structs.VolumeDeleteRequest, reply *structs.GenericResponse) error {
	_, done, err := v.auth.gate("Volume.Delete", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("volume_id", args.VolumeID); err != nil {
		return err
	}
	vol, err := v.registered(args.VolumeID)
	if err != nil {
		return err
	}
	if vol.HasClaims() {
		return structs.NewError(structs.CodeConflict, v.claimsInTheWay(vol))
	}
	plug, err := v.srv.State().PluginByID(nil, vol.PluginID)
	if err != nil {
		return err
	}
	if plug != nil {
		if err := needController(plug, "plugin_id", capCreateDeleteVolume); err != nil {
			err.Message += "; `volume deregister` forgets the volume without deleting it"
			return err
		}
	}
	var out structs.ClientCSIControllerDeleteResponse
	err = csiOf(v.srv).ControllerDeleteVolume(&structs.ClientCSIControllerDeleteRequest{
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
	v.srv.Logger.Info("volume deleted", "volume", vol.ID, "plugin", vol.PluginID, "external_id", vol.ExternalID,
		"controller", out.ControllerNodeID, "index", index)
	reply.Index = index
	return nil
}

// claimsInTheWay says why a volume with claims cannot be deleted yet, and
// whether waiting will do: claims of allocations that were stopped, and
// past claims, are being released (a delete right after `alloc stop` is
// the common case); the others are held by running allocations.
func (v *Volume) claimsInTheWay(vol *structs.Volume) string {
	state := v.srv.State()
	var held, releasing []string
	for _, c := range vol.AllClaims() {
		if vol.PastClaims[c.AllocID] != nil {
			releasing = append(releasing, fmt.Sprintf("%s (%s)", c.AllocID, c.State))
			continue
		}
		a, err := state.AllocByID(nil, c.AllocID)
		if err == nil && a != nil && (a.DesiredStatus == structs.AllocDesiredStop || a.Terminal()) {
			releasing = append(releasing, c.AllocID+" (stopped)")
			continue
		}
		held = append(held, c.AllocID)
	}
	sort.Strings(held)
	sort.Strings(releasing)
	msg := fmt.Sprintf("volume %q has claims", vol.ID)
	if len(held) > 0 {
		msg += fmt.Sprintf("; held by running allocations: %s (stop them first)", strings.Join(held, ", "))
	}
	if len(releasing) > 0 {
		msg += fmt.Sprintf("; being released: %s (in progress: try again once `claimd volume status %s` shows no claims)",
			strings.Join(releasing, ", "), vol.ID)
	}
	return msg
}
