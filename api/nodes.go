package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Node.* calls: client nodes and their plugin fingerprints.

// RegisterNode registers a node and its plugin fingerprints.
func (c *Client) RegisterNode(ctx context.Context, node *structs.Node) (*structs.NodeUpdateResponse, error) {
	return call[structs.NodeUpdateResponse](ctx, c, "Node.Register", &structs.NodeRegisterRequest{Node: node})
}

// UpdateNodeStatus marks a node ready or down.
func (c *Client) UpdateNodeStatus(ctx context.Context, nodeID string, status structs.NodeStatus) (*structs.NodeUpdateResponse, error) {
	return call[structs.NodeUpdateResponse](ctx, c, "Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: nodeID, Status: status})
}

// DeregisterNodes removes nodes; their allocations become lost.
func (c *Client) DeregisterNodes(ctx context.Context, ids ...string) (uint64, error) {
	return c.write(ctx, "Node.Deregister", &structs.NodeDeregisterRequest{NodeIDs: ids})
}

// Node reads one node.
func (c *Client) Node(ctx context.Context, id string, q structs.QueryOptions) (*structs.Node, structs.QueryMeta, error) {
	out, err := call[structs.NodeResponse](ctx, c, "Node.Get", &structs.NodeSpecificRequest{ID: id, QueryOptions: q})
	return out.Node, out.QueryMeta, err
}

// Nodes lists nodes.
func (c *Client) Nodes(ctx context.Context, q structs.QueryOptions) ([]*structs.Node, structs.QueryMeta, error) {
	out, err := call[structs.NodeListResponse](ctx, c, "Node.List", &structs.NodeListRequest{QueryOptions: q})
	return out.Nodes, out.QueryMeta, err
}

// DrainNode drains a node (or, with dryRun, only plans it): ineligible for
// new claims, its allocations stopped, their claims released in order.
func (c *Client) DrainNode(ctx context.Context, nodeID string, dryRun bool) (*structs.NodeDrainResponse, error) {
	return call[structs.NodeDrainResponse](ctx, c, "Node.Drain", &structs.NodeDrainRequest{NodeID: nodeID, DryRun: dryRun})
}

// NodeDrainStatus reads a drain's progress; with q.MinQueryIndex it
// blocks until something changes.
func (c *Client) NodeDrainStatus(ctx context.Context, nodeID string, q structs.QueryOptions) (*structs.NodeDrainStatus, structs.QueryMeta, error) {
	out, err := call[structs.NodeDrainStatusResponse](ctx, c, "Node.DrainStatus", &structs.NodeDrainStatusRequest{NodeID: nodeID, QueryOptions: q})
	return out.Status, out.QueryMeta, err
}

// UpdateNodeEligibility makes a node eligible or ineligible for new claims.
func (c *Client) UpdateNodeEligibility(ctx context.Context, nodeID string, eligible bool) (uint64, error) {
	e := structs.NodeIneligible
	if eligible {
		e = structs.NodeEligible
	}
	out, err := call[structs.NodeEligibilityResponse](ctx, c, "Node.UpdateEligibility", &structs.NodeEligibilityRequest{NodeID: nodeID, Eligibility: e})
	return out.Index, err
}

// PurgeNode frees a deregistered node's ID for another secret (management
// token). The answer lists the claims the node still holds: they wait for
// `volume detach -force` and are never released by a node that registers
// the ID again.
func (c *Client) PurgeNode(ctx context.Context, nodeID string) (*structs.NodePurgeResponse, error) {
	return call[structs.NodePurgeResponse](ctx, c, "Node.Purge", &structs.NodePurgeRequest{NodeID: nodeID})
}
