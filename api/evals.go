package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Eval.* calls: the volume-claim GC's evaluations.

// Evals lists evals, optionally by status and volume.
func (c *Client) Evals(ctx context.Context, status structs.EvalStatus, volumeID string, q structs.QueryOptions) ([]*structs.Eval, structs.QueryMeta, error) {
	out, err := call[structs.EvalListResponse](ctx, c, "Eval.List", &structs.EvalListRequest{Status: status, VolumeID: volumeID, QueryOptions: q})
	return out.Evals, out.QueryMeta, err
}

// Eval reads one eval.
func (c *Client) Eval(ctx context.Context, id string, q structs.QueryOptions) (*structs.Eval, structs.QueryMeta, error) {
	out, err := call[structs.EvalResponse](ctx, c, "Eval.Get", &structs.EvalSpecificRequest{ID: id, QueryOptions: q})
	return out.Eval, out.QueryMeta, err
}
