package endpoints

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/claimd/claimd/structs"
)

// ClientCSI is the server-side shim for calls meant for client nodes' CSI
// plugins (seed 5). Controller calls find their own target: a healthy
// controller of the plugin picked here when the caller names none, and the
// named one checked when it does (seed 1); every call is then delivered
// over the target node's session, one hop away at most.
type ClientCSI struct {
	srv  Server
	auth *authz
}

// ControllerAttachVolume runs ControllerPublishVolume on a controller node.
func (c *ClientCSI) ControllerAttachVolume(args *structs.ClientCSIControllerAttachRequest, reply *structs.ClientCSIControllerAttachResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerAttachVolume", args); err != nil {
		return err
	}
	return c.controllerCall("ClientCSI.ControllerAttachVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// ControllerDetachVolume runs ControllerUnpublishVolume on a controller node.
func (c *ClientCSI) ControllerDetachVolume(args *structs.ClientCSIControllerDetachRequest, reply *structs.ClientCSIControllerDetachResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerDetachVolume", args); err != nil {
		return err
	}
	return c.controllerCall("ClientCSI.ControllerDetachVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// ControllerCreateVolume runs CreateVolume on a controller node.
func (c *ClientCSI) ControllerCreateVolume(args *structs.ClientCSIControllerCreateRequest, reply *structs.ClientCSIControllerCreateResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerCreateVolume", args); err != nil {
		return err
	}
	return c.controllerCall("ClientCSI.ControllerCreateVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// ControllerDeleteVolume runs DeleteVolume on a controller node.
func (c *ClientCSI) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteRequest, reply *structs.ClientCSIControllerDeleteResponse) error {
	if _, err := c.auth.check("ClientCSI.ControllerDeleteVolume", args); err != nil {
		return err
	}
	return c.controllerCall("ClientCSI.ControllerDeleteVolume", &args.CSIControllerQuery, &args.NodeRouting, args, reply,
		func(node string) { reply.ControllerNodeID = node })
}

// NodeDetachVolume runs NodeUnpublish (and NodeUnstage when no other
// allocation on the node uses the volume) on the claim's node.
func (c *ClientCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	if _, err := c.auth.check("ClientCSI.NodeDetachVolume", args); err != nil {
		return err
	}
	if err := structs.ValidateID("node_id", args.NodeID); err != nil {
		return err
	}
	if err := structs.ValidateID("plugin_id", args.PluginID); err != nil {
		return err
	}
	if err := structs.ValidateID("volume_id", args.VolumeID); err != nil {
		return err
	}
	if err := structs.ValidateID("alloc_id", args.AllocID); err != nil {
		return err
	}
	return c.srv.NodeRouter().Call(context.Background(), args.NodeID, "ClientCSI.NodeDetachVolume", &args.NodeRouting, args, reply)
}

func (c *ClientCSI) controllerCall(method string, q *structs.CSIControllerQuery, routing *structs.NodeRouting,
	args, reply any, answered func(string)) error {
	if err := structs.ValidateID("plugin_id", q.PluginID); err != nil {
		return err
	}
	if routing.Forwarded {
		// The first server chose and checked the target already.
		return c.srv.NodeRouter().Call(context.Background(), q.ControllerNodeID, method, routing, args, reply)
	}
	targets, err := c.controllerTargets(q)
	if err != nil {
		return err
	}
	requested := q.ControllerNodeID
	defer func() { q.ControllerNodeID = requested }()
	var errs []error
	for _, node := range targets {
		q.ControllerNodeID = node
		err := c.srv.NodeRouter().Call(context.Background(), node, method, routing, args, reply)
		if err == nil {
			answered(node)
			return nil
		}
		c.srv.Logger().Warn("controller call failed; trying the next controller", "method", method,
			"plugin", q.PluginID, "node", node, "error", err)
		errs = append(errs, fmt.Errorf("node %s: %w", node, err))
		if !errors.Is(err, structs.ErrUnavailable) && !errors.Is(err, structs.ErrTimeout) {
			// The plugin answered and refused: another controller of the
			// same storage would refuse the same way.
			return err
		}
	}
	return structs.NewError(structs.CodeUnavailable, fmt.Sprintf("no controller of plugin %q answered: %v", q.PluginID, errors.Join(errs...)))
}

// controllerTargets returns the nodes to try, in order: the named node first
// when given (after checking it), then the other healthy controllers in
// random order so that load spreads.
func (c *ClientCSI) controllerTargets(q *structs.CSIControllerQuery) ([]string, error) {
	plug, err := c.srv.State().PluginByID(nil, q.PluginID)
	if err != nil {
		return nil, err
	}
	if plug == nil {
		return nil, structs.NotFound("plugin", q.PluginID)
	}
	var healthy []string
	for _, id := range structs.SortedKeys(plug.Controllers) {
		if !plug.Controllers[id].Healthy {
			continue
		}
		node, err := c.srv.State().NodeByID(nil, id)
		if err != nil {
			return nil, err
		}
		if node != nil && node.Status == structs.NodeStatusReady {
			healthy = append(healthy, id)
		}
	}
	rand.Shuffle(len(healthy), func(i, j int) { healthy[i], healthy[j] = healthy[j], healthy[i] })
	if q.ControllerNodeID != "" {
		found := false
		for i, id := range healthy {
			if id == q.ControllerNodeID {
				healthy[0], healthy[i] = healthy[i], healthy[0]
				found = true
			}
		}
		if !found {
			return nil, structs.Invalid("controller_node_id", fmt.Sprintf("node %q does not run a healthy controller of plugin %q", q.ControllerNodeID, q.PluginID))
		}
	}
	if len(healthy) == 0 {
		return nil, structs.NewError(structs.CodeUnschedulable, fmt.Sprintf("plugin %q has no healthy controller", q.PluginID))
	}
	return healthy, nil
}
