package endpoints

import "github.com/claimd/claimd/structs"

// ClientCSI is the RPC entry for calls meant for client nodes' CSI plugins
// (seed 5), which only servers make: a server that does not hold the
// target node's session sends them here, to the one that does. Each is
// checked, then handed to the attachment manager, which picks and checks
// a controller target (seed 1) and delivers the call over the node's
// session, one hop away at most.
type ClientCSI struct {
	srv  *Deps
	auth *authz
}

// csiCalls makes the same calls in process, for the server's own work
// (a claim's publish, volume create, snapshot and expand): straight to the
// attachment manager, since the call that started that work was checked
// where it entered.
type csiCalls struct{ m Attachments }

func csiOf(srv *Deps) csiCalls { return csiCalls{m: srv.Attachments} }

func (c csiCalls) ControllerCreateVolume(args *structs.ClientCSIControllerCreateRequest, reply *structs.ClientCSIControllerCreateResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerCreateVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteRequest, reply *structs.ClientCSIControllerDeleteResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerDeleteVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerAttachVolume(args *structs.ClientCSIControllerAttachRequest, reply *structs.ClientCSIControllerAttachResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerAttachVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerDetachVolume(args *structs.ClientCSIControllerDetachRequest, reply *structs.ClientCSIControllerDetachResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerDetachVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerCreateSnapshot(args *structs.ClientCSIControllerSnapshotRequest, reply *structs.ClientCSIControllerSnapshotResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerCreateSnapshot", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerDeleteSnapshot(args *structs.ClientCSIControllerSnapshotDeleteRequest, reply *structs.ClientCSIControllerSnapshotDeleteResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerDeleteSnapshot", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerListSnapshots(args *structs.ClientCSIControllerSnapshotListRequest, reply *structs.ClientCSIControllerSnapshotListResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerListSnapshots", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerExpandVolume(args *structs.ClientCSIControllerExpandRequest, reply *structs.ClientCSIControllerExpandResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerExpandVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) ControllerListVolumes(args *structs.ClientCSIControllerListVolumesRequest, reply *structs.ClientCSIControllerListVolumesResponse) error {
	return c.m.ControllerCall("ClientCSI.ControllerListVolumes", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

func (c csiCalls) NodeDetachVolume(args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	return c.m.NodeDetach(nil, args, reply)
}

func (c csiCalls) NodeExpandVolume(args *structs.ClientCSINodeExpandRequest, reply *structs.ClientCSINodeExpandResponse) error {
	return c.m.NodeExpand(args, reply)
}

// ControllerAttachVolume runs ControllerPublishVolume on a controller node.
func (c *ClientCSI) ControllerAttachVolume(args *structs.ClientCSIControllerAttachRequest, reply *structs.ClientCSIControllerAttachResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerAttachVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerAttachVolume(args, reply)
}

// ControllerDetachVolume runs ControllerUnpublishVolume on a controller node.
func (c *ClientCSI) ControllerDetachVolume(args *structs.ClientCSIControllerDetachRequest, reply *structs.ClientCSIControllerDetachResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerDetachVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerDetachVolume(args, reply)
}

// ControllerCreateVolume runs CreateVolume on a controller node.
func (c *ClientCSI) ControllerCreateVolume(args *structs.ClientCSIControllerCreateRequest, reply *structs.ClientCSIControllerCreateResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerCreateVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerCreateVolume(args, reply)
}

// ControllerDeleteVolume runs DeleteVolume on a controller node.
func (c *ClientCSI) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteRequest, reply *structs.ClientCSIControllerDeleteResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerDeleteVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerDeleteVolume(args, reply)
}

// ControllerListVolumes asks a controller node what the storage holds
// (reconciliation, forwarded from the leader).
func (c *ClientCSI) ControllerListVolumes(args *structs.ClientCSIControllerListVolumesRequest, reply *structs.ClientCSIControllerListVolumesResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerListVolumes", args); err != nil {
		return err
	}
	return csiOf(c.srv).ControllerListVolumes(args, reply)
}

// NodeDetachVolume runs NodeUnpublish (and NodeUnstage when no other
// allocation on the node uses the volume) on the claim's node.
func (c *ClientCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	if _, err := c.auth.check("ClientCSI.NodeDetachVolume", args); err != nil {
		return err
	}
	return csiOf(c.srv).NodeDetachVolume(args, reply)
}
