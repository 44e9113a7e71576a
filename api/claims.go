package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Claim claims a volume for an allocation.
func (c *Client) Claim(ctx context.Context, req *structs.VolumeClaimRequest) (*structs.VolumeClaimResponse, error) {
	var out structs.VolumeClaimResponse
	err := c.Call(ctx, "Volume.Claim", req, &out)
	return &out, err
}

// Release releases an allocation's claim on a volume (the same RPC).
func (c *Client) Release(ctx context.Context, volumeID, allocID string) (*structs.VolumeClaimResponse, error) {
	return c.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: volumeID, AllocID: allocID, Release: true})
}

// PlaceAllocs places allocations.
func (c *Client) PlaceAllocs(ctx context.Context, allocs ...*structs.Alloc) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "Alloc.Place", &structs.AllocPlaceRequest{Allocs: allocs}, &out)
	return out.Index, err
}

// StopAllocs sets allocations' desired status to stop.
func (c *Client) StopAllocs(ctx context.Context, ids ...string) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "Alloc.Stop", &structs.AllocStopRequest{AllocIDs: ids}, &out)
	return out.Index, err
}

// Alloc reads one allocation.
func (c *Client) Alloc(ctx context.Context, id string, q structs.QueryOptions) (*structs.Alloc, structs.QueryMeta, error) {
	var out structs.AllocResponse
	err := c.Call(ctx, "Alloc.Get", &structs.AllocSpecificRequest{ID: id, QueryOptions: q}, &out)
	return out.Alloc, out.QueryMeta, err
}

// Allocs lists allocations, all or one node's ("" = all).
func (c *Client) Allocs(ctx context.Context, nodeID string, q structs.QueryOptions) ([]*structs.Alloc, structs.QueryMeta, error) {
	var out structs.AllocListResponse
	err := c.Call(ctx, "Alloc.List", &structs.AllocListRequest{NodeID: nodeID, QueryOptions: q}, &out)
	return out.Allocs, out.QueryMeta, err
}

// UpdateAllocs reports allocations' client statuses (what a client agent does).
func (c *Client) UpdateAllocs(ctx context.Context, nodeID string, updates ...*structs.AllocClientUpdate) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "Node.UpdateAlloc", &structs.AllocClientUpdateRequest{NodeID: nodeID, Allocs: updates}, &out)
	return out.Index, err
}

// RegisterNode registers a node and its plugin fingerprints.
func (c *Client) RegisterNode(ctx context.Context, node *structs.Node) (*structs.NodeUpdateResponse, error) {
	var out structs.NodeUpdateResponse
	err := c.Call(ctx, "Node.Register", &structs.NodeRegisterRequest{Node: node}, &out)
	return &out, err
}

// UpdateNodeStatus marks a node ready or down.
func (c *Client) UpdateNodeStatus(ctx context.Context, nodeID string, status structs.NodeStatus) (*structs.NodeUpdateResponse, error) {
	var out structs.NodeUpdateResponse
	err := c.Call(ctx, "Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: nodeID, Status: status}, &out)
	return &out, err
}

// Node reads one node.
func (c *Client) Node(ctx context.Context, id string, q structs.QueryOptions) (*structs.Node, structs.QueryMeta, error) {
	var out structs.NodeResponse
	err := c.Call(ctx, "Node.Get", &structs.NodeSpecificRequest{ID: id, QueryOptions: q}, &out)
	return out.Node, out.QueryMeta, err
}

// Nodes lists nodes.
func (c *Client) Nodes(ctx context.Context, q structs.QueryOptions) ([]*structs.Node, structs.QueryMeta, error) {
	var out structs.NodeListResponse
	err := c.Call(ctx, "Node.List", &structs.NodeListRequest{QueryOptions: q}, &out)
	return out.Nodes, out.QueryMeta, err
}

// Plugin reads one plugin.
func (c *Client) Plugin(ctx context.Context, id string, q structs.QueryOptions) (*structs.Plugin, structs.QueryMeta, error) {
	var out structs.PluginResponse
	err := c.Call(ctx, "Plugin.Get", &structs.PluginSpecificRequest{ID: id, QueryOptions: q}, &out)
	return out.Plugin, out.QueryMeta, err
}

// Plugins lists plugins.
func (c *Client) Plugins(ctx context.Context, q structs.QueryOptions) ([]*structs.Plugin, structs.QueryMeta, error) {
	var out structs.PluginListResponse
	err := c.Call(ctx, "Plugin.List", &structs.PluginListRequest{QueryOptions: q}, &out)
	return out.Plugins, out.QueryMeta, err
}

// Evals lists evals, optionally by status and volume.
func (c *Client) Evals(ctx context.Context, status structs.EvalStatus, volumeID string, q structs.QueryOptions) ([]*structs.Eval, structs.QueryMeta, error) {
	var out structs.EvalListResponse
	err := c.Call(ctx, "Eval.List", &structs.EvalListRequest{Status: status, VolumeID: volumeID, QueryOptions: q}, &out)
	return out.Evals, out.QueryMeta, err
}

// Eval reads one eval.
func (c *Client) Eval(ctx context.Context, id string, q structs.QueryOptions) (*structs.Eval, structs.QueryMeta, error) {
	var out structs.EvalResponse
	err := c.Call(ctx, "Eval.Get", &structs.EvalSpecificRequest{ID: id, QueryOptions: q}, &out)
	return out.Eval, out.QueryMeta, err
}

// SystemGC runs the claim GC now; it returns the number of evals created.
func (c *Client) SystemGC(ctx context.Context) (int, error) {
	var out structs.SystemGCResponse
	err := c.Call(ctx, "System.GarbageCollect", &structs.SystemGCRequest{}, &out)
	return out.EvalsCreated, err
}

// ReleaseStatus returns the leader's release retry state per volume.
func (c *Client) ReleaseStatus(ctx context.Context) (map[string]structs.ReleaseStatus, error) {
	var out structs.ReleaseStatusResponse
	err := c.Call(ctx, "System.ReleaseStatus", &structs.ReleaseStatusRequest{}, &out)
	return out.Volumes, err
}

// DetachVolume releases the claims a node holds on a volume now; force
// skips the node detach for a node that is gone for good.
func (c *Client) DetachVolume(ctx context.Context, volumeID, nodeID string, force bool) (*structs.VolumeDetachResponse, error) {
	var out structs.VolumeDetachResponse
	err := c.Call(ctx, "Volume.Detach", &structs.VolumeDetachRequest{VolumeID: volumeID, NodeID: nodeID, Force: force}, &out)
	return &out, err
}

// DeregisterNodes removes nodes; their allocations become lost.
func (c *Client) DeregisterNodes(ctx context.Context, ids ...string) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "Node.Deregister", &structs.NodeDeregisterRequest{NodeIDs: ids}, &out)
	return out.Index, err
}
