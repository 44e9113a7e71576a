package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// System.* calls: the claim GC and the leader's release retry state.

// SystemGC runs the claim GC now; it returns the number of evals created.
func (c *Client) SystemGC(ctx context.Context) (int, error) {
	out, err := call[structs.SystemGCResponse](ctx, c, "System.GarbageCollect", &structs.SystemGCRequest{})
	return out.EvalsCreated, err
}

// ReleaseStatus returns the leader's release retry state per volume.
func (c *Client) ReleaseStatus(ctx context.Context) (map[string]structs.ReleaseStatus, error) {
	out, err := call[structs.ReleaseStatusResponse](ctx, c, "System.ReleaseStatus", &structs.ReleaseStatusRequest{})
	return out.Volumes, err
}
