package attachment

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/structs"
)

// ControllerCall delivers a controller call (method names the client
// agent's handler, "ClientCSI.ControllerAttachVolume") to a controller of
// q.PluginID: the named node after checking it runs a healthy controller,
// then the other healthy controllers in random order, so that load spreads
// and a controller that is down is passed over. A plugin that answered and
// refused is not asked again elsewhere: another controller of the same
// storage would refuse the same way. answered is told which node answered.
// A call already forwarded once goes only to the node it names.
//
// A call this server starts runs under the leader's storage lease (a grant
// begun here), one forwarded here within the budget it brought (decision
// 45).
func (m *Manager) ControllerCall(method string, q *structs.CSIControllerQuery, routing *structs.NodeRouting,
	args, reply any, answered func(node string)) error {
	return m.controllerCall(nil, method, q, routing, args, reply, answered)
}

// controllerCall is ControllerCall within g (nil: a grant begun now).
func (m *Manager) controllerCall(g *leaderlease.Grant, method string, q *structs.CSIControllerQuery, routing *structs.NodeRouting,
	args, reply any, answered func(node string)) error {
	if err := structs.ValidateID("plugin_id", q.PluginID); err != nil {
		return err
	}
	if routing.Forwarded {
		// The first server chose and checked the target already.
		return m.call(nil, q.ControllerNodeID, method, routing, args, reply)
	}
	if g == nil {
		var err error
		if g, err = m.lease.Begin(); err != nil {
			return err
		}
	}
	targets, err := m.controllerTargets(q)
	if err != nil {
		return err
	}
	requested := q.ControllerNodeID
	defer func() { q.ControllerNodeID = requested }()
	var errs []error
	for _, node := range targets {
		q.ControllerNodeID = node
		err := m.call(g, node, method, routing, args, reply)
		if err == nil {
			answered(node)
			return nil
		}
		m.logger.Warn("controller call failed; trying the next controller", "method", method,
			"plugin", q.PluginID, "node", node, "error", err)
		errs = append(errs, fmt.Errorf("node %s: %w", node, err))
		if !errors.Is(err, structs.ErrUnavailable) && !errors.Is(err, structs.ErrTimeout) || isLeaseRefusal(err) {
			return err
		}
	}
	return structs.NewError(structs.CodeUnavailable, fmt.Sprintf("no controller of plugin %q answered: %v", q.PluginID, errors.Join(errs...)))
}

// controllerTargets returns the nodes to try, in order: the named node first
// when given (after checking it), then the other healthy controllers in
// random order. Only admitted controllers are targets (issue 38): a call
// carries the volume's secrets and its success is recorded as done, so a
// node that merely says it runs a controller (any client certificate may
// register one) gets neither. A plugin whose controllers are all pending
// says so, naming them and the command that admits them.
func (m *Manager) controllerTargets(q *structs.CSIControllerQuery) ([]string, error) {
	state := m.state.State()
	plug, err := state.PluginByID(nil, q.PluginID)
	if err != nil {
		return nil, err
	}
	if plug == nil {
		return nil, structs.NotFound("plugin", q.PluginID)
	}
	var healthy []string
	for _, id := range structs.SortedKeys(plug.Controllers) {
		if !plug.Controllers[id].Healthy || !plug.ControllerAdmitted(id) {
			continue
		}
		node, err := state.NodeByID(nil, id)
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
			problem := fmt.Sprintf("node %q does not run a healthy controller of plugin %q", q.ControllerNodeID, q.PluginID)
			if plug.Controllers[q.ControllerNodeID] != nil && !plug.ControllerAdmitted(q.ControllerNodeID) {
				problem = fmt.Sprintf("the controller of plugin %q on node %q is not admitted (claimd plugin admit %s %s)",
					q.PluginID, q.ControllerNodeID, q.PluginID, q.ControllerNodeID)
			}
			return nil, structs.Invalid("controller_node_id", problem)
		}
	}
	if len(healthy) == 0 {
		if pending := plug.PendingControllers(); len(pending) > 0 {
			return nil, structs.NewError(structs.CodeUnschedulable, fmt.Sprintf(
				"plugin %q has no admitted healthy controller; pending admission: %s (an operator with plugin:write runs: claimd plugin admit %s NODE)",
				q.PluginID, listNodes(pending), q.PluginID))
		}
		return nil, structs.NewError(structs.CodeUnschedulable, fmt.Sprintf("plugin %q has no healthy controller", q.PluginID))
	}
	return healthy, nil
}

// listNodes names at most a few nodes, with how many more there are: an
// error message stays short however many nodes registered a controller.
func listNodes(ids []string) string {
	const show = 5
	if len(ids) <= show {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:show], ", "), len(ids)-show)
}

// NodeDetach runs NodeUnpublish (and NodeUnstage when no other allocation
// on the node uses the volume) on the claim's node, over its session,
// within g: the grant of the release that read the claim (nil: one begun
// now).
func (m *Manager) NodeDetach(g *leaderlease.Grant, args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	if err := validateIDs("node_id", args.NodeID, "plugin_id", args.PluginID, "volume_id", args.VolumeID, "alloc_id", args.AllocID); err != nil {
		return err
	}
	return m.call(g, args.NodeID, "ClientCSI.NodeDetachVolume", &args.NodeRouting, args, reply)
}

// NodeExpand runs NodeExpandVolume on a node that has the volume staged or
// published, over its session.
func (m *Manager) NodeExpand(args *structs.ClientCSINodeExpandRequest, reply *structs.ClientCSINodeExpandResponse) error {
	if err := validateIDs("node_id", args.NodeID, "plugin_id", args.PluginID, "volume_id", args.VolumeID); err != nil {
		return err
	}
	return m.call(nil, args.NodeID, "ClientCSI.NodeExpandVolume", &args.NodeRouting, args, reply)
}

// isLeaseRefusal: this server may not make storage calls now (it does not
// lead, could not confirm it, or is in its hold-off); trying another
// controller would be refused the same way.
func isLeaseRefusal(err error) bool {
	var ho *leaderlease.HoldoffError
	return errors.Is(err, structs.ErrNoLeader) || errors.As(err, &ho)
}

// NodeStats asks a claim's node for the volume's usage over its session.
// It reads and changes nothing, so it needs no lease: any server may ask.
func (m *Manager) NodeStats(args *structs.ClientCSINodeStatsRequest, reply *structs.ClientCSINodeStatsResponse) error {
	if err := validateIDs("node_id", args.NodeID, "plugin_id", args.PluginID, "volume_id", args.VolumeID, "alloc_id", args.AllocID); err != nil {
		return err
	}
	return m.nodes.Call(context.Background(), args.NodeID, "ClientCSI.NodeVolumeStats", &args.NodeRouting, args, reply)
}

// validateIDs checks field, ID pairs with structs.ValidateID, in order.
func validateIDs(fieldsAndIDs ...string) error {
	for i := 0; i+1 < len(fieldsAndIDs); i += 2 {
		if err := structs.ValidateID(fieldsAndIDs[i], fieldsAndIDs[i+1]); err != nil {
			return err
		}
	}
	return nil
}
