package endpoints

import (
	"github.com/claimd/claimd/structs"
)

var capModifyVolume = controllerCap{"MODIFY_VOLUME", func(c *structs.CSIControllerCapabilities) bool { return c.ModifyVolume }}

// Modify changes a volume's mutable parameters through a controller
// (ControllerModifyVolume), then records them in one entry, as an
// expansion records its size: only what the plugin did is recorded. A
// repeat is harmless (the plugin applies the same values again).
func (v *Volume) Modify(args *structs.VolumeModifyRequest, reply *structs.VolumeModifyResponse) error {
	_, done, err := v.auth.gate("Volume.Modify", args, reply, nil)
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
	if cerr := needController(plug, "volume_id", capModifyVolume); cerr != nil {
		return cerr
	}
	req := &structs.ClientCSIControllerModifyRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
		VolumeID:           vol.ID, ExternalID: vol.ExternalID, MutableParameters: args.MutableParameters, Secrets: vol.Secrets,
	}
	var out structs.ClientCSIControllerModifyResponse
	if err := csiOf(v.srv).ControllerModifyVolume(req, &out); err != nil {
		return err
	}
	_, index, err := v.srv.Apply(structs.VolumeModifiedRequestType, &structs.VolumeModifiedRequest{
		VolumeID: vol.ID, ExternalID: vol.ExternalID, MutableParameters: args.MutableParameters})
	if err != nil {
		return err
	}
	reply.Index = index
	if now, err := v.srv.State().VolumeByID(nil, vol.ID); err == nil && now != nil {
		reply.Volume = now.Sanitize()
	}
	v.srv.Logger.Info("volume modified", "volume", vol.ID, "parameters", structs.SortedKeys(args.MutableParameters), "controller", out.ControllerNodeID)
	return nil
}

// ControllerModifyVolume runs ControllerModifyVolume on a controller node.
func (c *ClientCSI) ControllerModifyVolume(args *structs.ClientCSIControllerModifyRequest, reply *structs.ClientCSIControllerModifyResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerModifyVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerModifyVolume(args, reply)
}

func (c csiCalls) ControllerModifyVolume(args *structs.ClientCSIControllerModifyRequest, reply *structs.ClientCSIControllerModifyResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerModifyVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}
