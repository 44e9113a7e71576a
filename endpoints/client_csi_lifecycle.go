package endpoints

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// ControllerCreateSnapshot runs CreateSnapshot on a controller node.
func (c *ClientCSI) ControllerCreateSnapshot(args *structs.ClientCSIControllerSnapshotRequest, reply *structs.ClientCSIControllerSnapshotResponse) error {
	return c.checkedControllerCall("ClientCSI.ControllerCreateSnapshot", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// ControllerDeleteSnapshot runs DeleteSnapshot on a controller node.
func (c *ClientCSI) ControllerDeleteSnapshot(args *structs.ClientCSIControllerSnapshotDeleteRequest, reply *structs.ClientCSIControllerSnapshotDeleteResponse) error {
	return c.checkedControllerCall("ClientCSI.ControllerDeleteSnapshot", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// ControllerListSnapshots runs ListSnapshots on a controller node.
func (c *ClientCSI) ControllerListSnapshots(args *structs.ClientCSIControllerSnapshotListRequest, reply *structs.ClientCSIControllerSnapshotListResponse) error {
	return c.checkedControllerCall("ClientCSI.ControllerListSnapshots", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// ControllerExpandVolume runs ControllerExpandVolume on a controller node.
func (c *ClientCSI) ControllerExpandVolume(args *structs.ClientCSIControllerExpandRequest, reply *structs.ClientCSIControllerExpandResponse) error {
	return c.checkedControllerCall("ClientCSI.ControllerExpandVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// checkedControllerCall is the access check, then controllerCall.
func (c *ClientCSI) checkedControllerCall(method string, q *structs.CSIControllerQuery, routing *structs.NodeRouting,
	args structs.Authenticated, reply any, answered func(string)) error {
	if _, err := c.auth.check(method, args); err != nil {
		return err
	}
	return c.controllerCall(method, q, routing, args, reply, answered)
}

// NodeExpandVolume runs NodeExpandVolume on a node that has the volume
// staged or published, delivered over that node's session (forwarded to
// the server holding it, as the node detach is).
func (c *ClientCSI) NodeExpandVolume(args *structs.ClientCSINodeExpandRequest, reply *structs.ClientCSINodeExpandResponse) error {
	if _, err := c.auth.check("ClientCSI.NodeExpandVolume", args); err != nil {
		return err
	}
	for _, f := range []struct{ field, id string }{
		{"node_id", args.NodeID}, {"plugin_id", args.PluginID}, {"volume_id", args.VolumeID},
	} {
		if err := structs.ValidateID(f.field, f.id); err != nil {
			return err
		}
	}
	return c.srv.NodeRouter().Call(context.Background(), args.NodeID, "ClientCSI.NodeExpandVolume", &args.NodeRouting, args, reply)
}
