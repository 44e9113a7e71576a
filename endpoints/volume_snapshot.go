package endpoints

import (
	"fmt"
	"sort"

	"github.com/claimd/claimd/structs"
)

// Snapshots live only in the controller plugins (decision 32): these
// endpoints check what the request needs against the state, then ask a
// controller, as Create does.

// SnapshotCreate has a controller plugin snapshot a registered volume. The
// snapshot's name makes a retry find the same snapshot (CSI CreateSnapshot
// is idempotent by name).
func (v *Volume) SnapshotCreate(args *structs.VolumeSnapshotCreateRequest, reply *structs.VolumeSnapshotCreateResponse) error {
	_, done, err := v.auth.gate("Volume.SnapshotCreate", args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	vol, err := v.registered(args.VolumeID)
	if err != nil {
		return err
	}
	plug, err := v.plugin(vol.PluginID)
	if err != nil {
		return err
	}
	if err := needController(plug, "volume_id", capCreateDeleteSnapshot); err != nil {
		return err
	}
	var out structs.ClientCSIControllerSnapshotResponse
	err = csiOf(v.srv).ControllerCreateSnapshot(&structs.ClientCSIControllerSnapshotRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
		Name:               args.Name, SourceExternalID: vol.ExternalID, Parameters: args.Parameters, Secrets: vol.Secrets,
	}, &out)
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("snapshot %q of volume %q with plugin %q", args.Name, vol.ID, vol.PluginID))
	}
	out.Snapshot.PluginID, out.Snapshot.SourceVolumeID = vol.PluginID, vol.ID
	v.srv.Logger.Info("snapshot created", "volume", vol.ID, "name", args.Name, "snapshot", out.Snapshot.ID,
		"plugin", vol.PluginID, "controller", out.ControllerNodeID)
	reply.Snapshot = out.Snapshot
	return nil
}

// SnapshotDelete has a controller plugin delete a snapshot. Volumes made
// from it are not affected, and an unknown snapshot is success (CSI).
func (v *Volume) SnapshotDelete(args *structs.VolumeSnapshotDeleteRequest, reply *structs.GenericResponse) error {
	_, done, err := v.auth.gate("Volume.SnapshotDelete", args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	plug, err := v.plugin(args.PluginID)
	if err != nil {
		return err
	}
	if err := needController(plug, "plugin_id", capCreateDeleteSnapshot); err != nil {
		return err
	}
	var out structs.ClientCSIControllerSnapshotDeleteResponse
	err = csiOf(v.srv).ControllerDeleteSnapshot(&structs.ClientCSIControllerSnapshotDeleteRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: args.PluginID}, SnapshotID: args.SnapshotID,
	}, &out)
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("delete snapshot %q with plugin %q", args.SnapshotID, args.PluginID))
	}
	v.srv.Logger.Info("snapshot deleted", "snapshot", args.SnapshotID, "plugin", args.PluginID, "controller", out.ControllerNodeID)
	return nil
}

// SnapshotList asks controllers for their snapshots: of one plugin, which
// must advertise LIST_SNAPSHOTS, or of every plugin that does. With every
// plugin, one that cannot be asked is named in Unreachable and the others
// are still listed.
func (v *Volume) SnapshotList(args *structs.VolumeSnapshotListRequest, reply *structs.VolumeSnapshotListResponse) error {
	_, done, err := v.auth.gate("Volume.SnapshotList", args, reply, nil)
	if done {
		return err
	}
	var plugins []*structs.Plugin
	if args.PluginID != "" {
		if err := structs.ValidateID("plugin_id", args.PluginID); err != nil {
			return err
		}
		plug, err := v.plugin(args.PluginID)
		if err != nil {
			return err
		}
		if err := needController(plug, "plugin_id", capListSnapshots); err != nil {
			return err
		}
		plugins = []*structs.Plugin{plug}
	} else {
		all, err := v.srv.State().Plugins(nil)
		if err != nil {
			return err
		}
		for _, p := range all {
			if hasController(p, capListSnapshots) {
				plugins = append(plugins, p)
			}
		}
	}
	reply.Snapshots = []*structs.Snapshot{}
	for _, plug := range plugins {
		var out structs.ClientCSIControllerSnapshotListResponse
		err := csiOf(v.srv).ControllerListSnapshots(&structs.ClientCSIControllerSnapshotListRequest{
			CSIControllerQuery: structs.CSIControllerQuery{PluginID: plug.ID}}, &out)
		if err != nil {
			if args.PluginID != "" {
				return structs.Wrap(err, fmt.Sprintf("list snapshots of plugin %q", plug.ID))
			}
			if reply.Unreachable == nil {
				reply.Unreachable = map[string]string{}
			}
			reply.Unreachable[plug.ID] = err.Error()
			continue
		}
		byExternal, err := v.volumesByExternalID(plug.ID)
		if err != nil {
			return err
		}
		for _, s := range out.Snapshots {
			s.PluginID, s.SourceVolumeID = plug.ID, byExternal[s.SourceExternalID]
			reply.Snapshots = append(reply.Snapshots, s)
		}
	}
	sort.Slice(reply.Snapshots, func(i, j int) bool {
		a, b := reply.Snapshots[i], reply.Snapshots[j]
		return a.PluginID < b.PluginID || a.PluginID == b.PluginID && a.ID < b.ID
	})
	return nil
}

// volumesByExternalID maps a plugin's volume IDs to claimd's, so listed
// snapshots can name the registered volume they were taken of.
func (v *Volume) volumesByExternalID(pluginID string) (map[string]string, error) {
	vols, err := v.srv.State().Volumes(nil, pluginID)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(vols))
	for _, vol := range vols {
		out[vol.ExternalID] = vol.ID
	}
	return out, nil
}
