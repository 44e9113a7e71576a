package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// System.* calls: the claim GC and the leader's release retry state.

// SystemGC runs the claim GC now and removes terminal allocations without
// claims; it returns the number of evals created.
func (c *Client) SystemGC(ctx context.Context) (int, error) {
	out, err := c.GarbageCollect(ctx, "")
	if err != nil {
		return 0, err
	}
	return out.EvalsCreated, nil
}

// GarbageCollect is SystemGC with the whole answer; allocPrefix limits the
// allocations removed to those whose ID starts with it.
func (c *Client) GarbageCollect(ctx context.Context, allocPrefix string) (*structs.SystemGCResponse, error) {
	return call[structs.SystemGCResponse](ctx, c, "System.GarbageCollect", &structs.SystemGCRequest{AllocPrefix: allocPrefix})
}

// ReleaseStatus returns the leader's release retry state per volume.
func (c *Client) ReleaseStatus(ctx context.Context) (map[string]structs.ReleaseStatus, error) {
	out, err := call[structs.ReleaseStatusResponse](ctx, c, "System.ReleaseStatus", &structs.ReleaseStatusRequest{})
	return out.Volumes, err
}
