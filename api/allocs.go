package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Alloc.* calls, and Node.UpdateAlloc: a client agent's report of its
// allocations.

// PlaceAllocs places allocations.
func (c *Client) PlaceAllocs(ctx context.Context, allocs ...*structs.Alloc) (uint64, error) {
	return c.write(ctx, "Alloc.Place", &structs.AllocPlaceRequest{Allocs: allocs})
}

// StopAllocs sets allocations' desired status to stop.
func (c *Client) StopAllocs(ctx context.Context, ids ...string) (uint64, error) {
	return c.write(ctx, "Alloc.Stop", &structs.AllocStopRequest{AllocIDs: ids})
}

// Alloc reads one allocation.
func (c *Client) Alloc(ctx context.Context, id string, q structs.QueryOptions) (*structs.Alloc, structs.QueryMeta, error) {
	out, err := call[structs.AllocResponse](ctx, c, "Alloc.Get", &structs.AllocSpecificRequest{ID: id, QueryOptions: q})
	return out.Alloc, out.QueryMeta, err
}

// Allocs lists allocations, all or one node's ("" = all).
func (c *Client) Allocs(ctx context.Context, nodeID string, q structs.QueryOptions) ([]*structs.Alloc, structs.QueryMeta, error) {
	out, err := call[structs.AllocListResponse](ctx, c, "Alloc.List", &structs.AllocListRequest{NodeID: nodeID, QueryOptions: q})
	return out.Allocs, out.QueryMeta, err
}

// UpdateAllocs reports allocations' client statuses (what a client agent does).
func (c *Client) UpdateAllocs(ctx context.Context, nodeID string, updates ...*structs.AllocClientUpdate) (uint64, error) {
	return c.write(ctx, "Node.UpdateAlloc", &structs.AllocClientUpdateRequest{NodeID: nodeID, Allocs: updates})
}
