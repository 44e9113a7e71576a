package endpoints

import "github.com/claimd/claimd/structs"

// ControllerCreateSnapshot runs CreateSnapshot on a controller node.
func (c *ClientCSI) ControllerCreateSnapshot(args *structs.ClientCSIControllerSnapshotRequest, reply *structs.ClientCSIControllerSnapshotResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerCreateSnapshot", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerCreateSnapshot(args, reply)
}

// ControllerDeleteSnapshot runs DeleteSnapshot on a controller node.
func (c *ClientCSI) ControllerDeleteSnapshot(args *structs.ClientCSIControllerSnapshotDeleteRequest, reply *structs.ClientCSIControllerSnapshotDeleteResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerDeleteSnapshot", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerDeleteSnapshot(args, reply)
}

// ControllerListSnapshots runs ListSnapshots on a controller node.
func (c *ClientCSI) ControllerListSnapshots(args *structs.ClientCSIControllerSnapshotListRequest, reply *structs.ClientCSIControllerSnapshotListResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerListSnapshots", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerListSnapshots(args, reply)
}

// ControllerExpandVolume runs ControllerExpandVolume on a controller node.
func (c *ClientCSI) ControllerExpandVolume(args *structs.ClientCSIControllerExpandRequest, reply *structs.ClientCSIControllerExpandResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerExpandVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerExpandVolume(args, reply)
}

// NodeExpandVolume runs NodeExpandVolume on a node that has the volume
// staged or published, delivered over that node's session (forwarded to
// the server holding it, as the node detach is).
func (c *ClientCSI) NodeExpandVolume(args *structs.ClientCSINodeExpandRequest, reply *structs.ClientCSINodeExpandResponse) error {
	if _, err := c.auth.check("ClientCSI.NodeExpandVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).NodeExpandVolume(args, reply)
}
