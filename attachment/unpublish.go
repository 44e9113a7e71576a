package attachment

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/structs"
)

// ErrVolumeDeregistered: the volume of a past claim is gone from the
// state, so nothing is left to release (the watcher stops retrying).
var ErrVolumeDeregistered = errors.New("volume deregistered")

// Unpublish controller-detaches the volume from a past claim's node,
// unless the plugin needs no controller or the node still needs the
// attachment for another claim (S4). It is called only after the claim's
// node detach (S3). The check and the detach happen under the (volume,
// node) lock that new claims' publishes also take, on fresh state, and one
// destructive controller call per plugin runs at a time.
//
// g is the grant of the release that read the claim (nil: one begun now);
// the detach is made only within it (decision 46).
func (m *Manager) Unpublish(g *leaderlease.Grant, vol *structs.Volume, c *structs.Claim) error {
	if g == nil {
		var err error
		if g, err = m.lease.Begin(); err != nil {
			return err
		}
	}
	plug, err := m.state.State().PluginSummary(nil, vol.PluginID)
	if err != nil {
		return err
	}
	if plug == nil {
		return fmt.Errorf("plugin %q has no instances; waiting for a controller", vol.PluginID)
	}
	if !plug.ControllerRequired {
		return nil
	}
	unlockAttach := m.locks.Lock(vol.ID, c.NodeID)
	defer unlockAttach()
	unlockPlugin := m.plugins.lock(vol.PluginID, vol.ID, m.controllerCallLimit(vol.PluginID))
	defer unlockPlugin()
	fresh, err := m.state.State().VolumeByID(nil, vol.ID)
	if err != nil {
		return err
	}
	if fresh == nil {
		return fmt.Errorf("%w: volume %q was deregistered; nothing can be released", ErrVolumeDeregistered, vol.ID)
	}
	for _, other := range fresh.AllClaims() {
		if other.AllocID == c.AllocID || other.NodeID != c.NodeID {
			continue
		}
		// A claim never controller-published holds no attachment and no
		// mount here (its publish, which takes the same lock, runs either
		// before we looked or after we detach). Counting it would keep a
		// writer's read-write attachment alive for a reader whose
		// read-only publish will be refused, and let failing claims starve
		// the release (chaos regression WriterFreedWhileItsNodeStaysAttached).
		if !other.ControllerPublished {
			continue
		}
		if other.State == structs.ClaimStateTaken {
			// On a single-writer volume a read-write attachment is the
			// writer's place: readers sharing it (decision 19) keep it
			// read-write, so the writer's claim must stay (and count as the
			// writer) until they are gone, or a new writer could be attached
			// on another node meanwhile (S1; found by the chaos suite).
			if fresh.AccessMode == structs.AccessModeMultiNodeSingleWriter && c.Mode == structs.ClaimModeWrite {
				return fmt.Errorf("waiting for alloc %s on the same node, which shares this writer's read-write attachment of a single-writer volume, to release it", other.AllocID)
			}
			m.logger.Debug("skipping controller detach: another live claim on the node uses the volume",
				"volume", vol.ID, "node", c.NodeID, "alloc", c.AllocID, "other", other.AllocID)
			return nil
		}
		if other.State.Rank() < structs.ClaimStateNodeDetached.Rank() {
			return fmt.Errorf("waiting for alloc %s on the same node to be node-detached first", other.AllocID)
		}
	}
	req := &structs.ClientCSIControllerDetachRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
		VolumeID:           vol.ID, ExternalID: vol.ExternalID, ExternalNodeID: c.ExternalNodeID,
		Secrets: fresh.Secrets,
	}
	var reply structs.ClientCSIControllerDetachResponse
	return m.controllerCall(g, "ClientCSI.ControllerDetachVolume", &req.CSIControllerQuery, &req.NodeRouting, req, &reply,
		func(node string) { reply.ControllerNodeID = node })
}

// DetachOrphan controller-detaches an attachment the storage reports and no
// claim explains (reconciliation found it, package reconcile). It takes the
// same (volume, node) lock a new claim's publish takes and reads fresh
// state under it, so it never detaches under a claim: any claim on that
// node, live or being released, makes it refuse (the release detaches
// what a claim holds).
func (m *Manager) DetachOrphan(vol *structs.Volume, nodeID, externalNodeID string) error {
	if externalNodeID == "" {
		return structs.Invalid("external_node_id", "must not be empty")
	}
	g, err := m.lease.Begin()
	if err != nil {
		return err
	}
	lockNode := nodeID
	if lockNode == "" {
		// A node claimd does not know: no claim can be taken there, but
		// lock on its plugin name all the same.
		lockNode = "external:" + externalNodeID
	}
	unlockAttach := m.locks.Lock(vol.ID, lockNode)
	defer unlockAttach()
	unlockPlugin := m.plugins.lock(vol.PluginID, vol.ID, m.controllerCallLimit(vol.PluginID))
	defer unlockPlugin()
	fresh, err := m.state.State().VolumeByID(nil, vol.ID)
	if err != nil {
		return err
	}
	if fresh == nil {
		return fmt.Errorf("%w: volume %q was deregistered", ErrVolumeDeregistered, vol.ID)
	}
	if fresh.ExternalID != vol.ExternalID {
		return structs.NewError(structs.CodeConflict, fmt.Sprintf("volume %q is now %q, not %q", vol.ID, fresh.ExternalID, vol.ExternalID))
	}
	for _, c := range fresh.AllClaims() {
		if c.ExternalNodeID == externalNodeID || (nodeID != "" && c.NodeID == nodeID) {
			return structs.NewError(structs.CodeConflict, fmt.Sprintf(
				"alloc %s claims volume %q on that node (%s): not an orphan", c.AllocID, vol.ID, c.State))
		}
	}
	if err := m.nodeDoesNotUse(fresh, nodeID); err != nil {
		return err
	}
	req := &structs.ClientCSIControllerDetachRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID},
		VolumeID:           vol.ID, ExternalID: vol.ExternalID, ExternalNodeID: externalNodeID,
		Secrets: fresh.Secrets,
	}
	var reply structs.ClientCSIControllerDetachResponse
	return m.controllerCall(g, "ClientCSI.ControllerDetachVolume", &req.CSIControllerQuery, &req.NodeRouting, req, &reply,
		func(node string) { reply.ControllerNodeID = node })
}

// nodeDoesNotUse asks a ready node whether it has the volume mounted
// before an attachment there that no claim explains is detached. The
// record can be older than the node: after a snapshot restore it lacks
// claims whose volumes are mounted and written, and detaching those would
// pull the storage from under a live workload. A node that is down or
// deregistered is not asked: under node_lost fence (the only policy whose
// orphans are repaired) it has stopped its writers by itself.
func (m *Manager) nodeDoesNotUse(vol *structs.Volume, nodeID string) error {
	if nodeID == "" {
		return nil
	}
	node, err := m.state.State().NodeByID(nil, nodeID)
	if err != nil {
		return err
	}
	if node == nil || node.Status != structs.NodeStatusReady {
		return nil
	}
	args := &structs.ClientCSINodeHeldRequest{NodeID: nodeID, VolumeID: vol.ID}
	var reply structs.ClientCSINodeHeldResponse
	if err := m.NodeHeld(args, &reply); err != nil {
		return fmt.Errorf("could not ask node %s whether it uses volume %q, so the attachment stays: %w", nodeID, vol.ID, err)
	}
	if len(reply.Allocs) > 0 {
		return structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"node %s has volume %q mounted for allocs %s although no claim records it (the record may be older than the node, as after a snapshot restore): not an orphan; the attachment stays",
			nodeID, vol.ID, strings.Join(reply.Allocs, ", ")))
	}
	return nil
}

// NodeHeld asks a node which allocations have a volume mounted there. It
// reads and changes nothing.
func (m *Manager) NodeHeld(args *structs.ClientCSINodeHeldRequest, reply *structs.ClientCSINodeHeldResponse) error {
	if err := validateIDs("node_id", args.NodeID, "volume_id", args.VolumeID); err != nil {
		return err
	}
	return m.nodes.Call(context.Background(), args.NodeID, "ClientCSI.NodeHeldVolume", &args.NodeRouting, args, reply)
}
