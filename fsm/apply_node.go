package fsm

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.NodeRegisterRequestType, applyNodeRegister)
	registerCommand(structs.NodeUpdateStatusRequestType, applyNodeUpdateStatus)
	registerCommand(structs.NodeDeregisterRequestType, applyNodeDeregister)
	registerCommand(structs.NodeEligibilityRequestType, applyNodeEligibility)
}

// applyNodeRegister creates or updates a node and re-derives its plugins.
// The secret ID is fixed at first registration, for the life of the
// cluster (node_identity.go): a node that presents another one is someone
// else claiming its identity, even after the node was deregistered.
func applyNodeRegister(tx *txn, req *structs.NodeRegisterRequest) (any, error) {
	if err := req.Node.Validate(); err != nil {
		return nil, err
	}
	old := getNode(tx, req.Node.ID)
	if old != nil && old.SecretID != req.Node.SecretID {
		return nil, structs.NewError(structs.CodePermissionDenied,
			fmt.Sprintf("node %q is registered with another secret_id", old.ID))
	}
	// The ID stays bound to its first secret after a deregistration too:
	// checked here as well as at the endpoint, so every replica refuses
	// the same entries whatever a server let through (issue 38).
	if err := bindIdentity(tx, req.Node); err != nil {
		return nil, err
	}
	n := req.Node.Copy()
	if n.Status == "" {
		n.Status = structs.NodeStatusReady
	}
	n.CreateIndex, n.ModifyIndex = tx.index, tx.index
	n.Eligibility = ""
	if old != nil {
		n.CreateIndex = old.CreateIndex
		// Eligibility is the operator's, not the agent's: a drained node
		// that re-registers stays ineligible.
		n.Eligibility = old.Eligibility
		if n.LastFence == nil {
			n.LastFence = old.LastFence
		}
	}
	tx.put(TableNodes, n)
	if n.Status == structs.NodeStatusDown && (old == nil || old.Status != structs.NodeStatusDown) {
		loseNodeAllocs(tx, n.ID)
	}
	autoAdmitControllers(tx, n, req.AutoAdmit) // issue 38: plugin_admission.go
	syncPlugins(tx, n.ID, old, n)
	return nil, nil
}

// applyNodeUpdateStatus marks a node ready or down. Down loses every
// allocation on it in the same entry (docs/architecture.md, node loss).
func applyNodeUpdateStatus(tx *txn, req *structs.NodeUpdateStatusRequest) (any, error) {
	if err := structs.ValidateID("node_id", req.NodeID); err != nil {
		return nil, err
	}
	if !req.Status.Valid() {
		return nil, structs.Invalid("status", fmt.Sprintf("%q is not %q or %q",
			req.Status, structs.NodeStatusReady, structs.NodeStatusDown))
	}
	old := getNode(tx, req.NodeID)
	if old == nil {
		return nil, structs.NotFound("node", req.NodeID)
	}
	if old.Status == req.Status {
		return nil, nil
	}
	n := old.Copy()
	n.Status = req.Status
	n.ModifyIndex = tx.index
	tx.put(TableNodes, n)
	if n.Status == structs.NodeStatusDown {
		loseNodeAllocs(tx, n.ID)
	}
	syncPlugins(tx, n.ID, old, n)
	return nil, nil
}

// applyNodeEligibility makes a node eligible or ineligible for new claims.
// Claims it already holds are untouched: a drain stops its allocations
// separately.
func applyNodeEligibility(tx *txn, req *structs.NodeEligibilityRequest) (any, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	old := getNode(tx, req.NodeID)
	if old == nil {
		return nil, structs.NotFound("node", req.NodeID)
	}
	want := req.Eligibility
	if want == structs.NodeEligible {
		want = "" // the stored form of eligible
	}
	if old.Eligibility == want {
		return nil, nil
	}
	n := old.Copy()
	n.Eligibility = want
	n.ModifyIndex = tx.index
	tx.put(TableNodes, n)
	return nil, nil
}

// applyNodeDeregister removes nodes. Their allocations become lost and
// their claims past; the past claims stay until detached or forced, since
// a node that left may still have the volume mounted. Each ID stays
// reserved for the node's secret: only the node itself can come back and
// finish those releases.
func applyNodeDeregister(tx *txn, req *structs.NodeDeregisterRequest) (any, error) {
	if len(req.NodeIDs) == 0 {
		return nil, structs.Invalid("node_ids", "must not be empty")
	}
	seen := make(map[string]bool, len(req.NodeIDs))
	for i, id := range req.NodeIDs {
		if seen[id] {
			return nil, structs.Invalid(fmt.Sprintf("node_ids[%d]", i), fmt.Sprintf("%q is given twice", id))
		}
		seen[id] = true
		old := getNode(tx, id)
		if old == nil {
			return nil, structs.NotFound("node", id)
		}
		loseNodeAllocs(tx, id)
		clearNodeFenceFailures(tx, id) // fence_failures.go
		tx.remove(TableNodes, old)
		reserveIdentity(tx, old)
		syncPlugins(tx, id, old, nil)
	}
	return nil, nil
}

// loseNodeAllocs marks a node's live allocations lost and releases their
// claims, in alloc ID order.
func loseNodeAllocs(tx *txn, nodeID string) {
	for _, raw := range tx.all(TableAllocs, indexNode, nodeID) {
		a := raw.(*structs.Alloc)
		if a.Terminal() {
			continue
		}
		c := a.Copy()
		c.ClientStatus = structs.AllocClientLost
		c.ClientDescription = "node " + nodeID + " lost"
		c.ModifyIndex = tx.index
		tx.put(TableAllocs, c)
		releaseAllocClaims(tx, c, structs.EvalTriggerNodeDown)
	}
}
