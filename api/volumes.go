package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Volume.* calls: registration, CSI create, delete and expand, reads,
// claims and detaches. CSI snapshots are in volume_snapshots.go.

// RegisterVolumes creates or updates volumes. The answer has the commit
// index and says which registered volumes it grew (a spec asking for more
// capacity than recorded) and the nodes where that is still pending.
func (c *Client) RegisterVolumes(ctx context.Context, vols ...*structs.Volume) (*structs.VolumeRegisterResponse, error) {
	return call[structs.VolumeRegisterResponse](ctx, c, "Volume.Register", &structs.VolumeRegisterRequest{Volumes: vols})
}

// DeregisterVolumes removes volumes.
func (c *Client) DeregisterVolumes(ctx context.Context, force bool, ids ...string) (uint64, error) {
	return c.write(ctx, "Volume.Deregister", &structs.VolumeDeregisterRequest{VolumeIDs: ids, Force: force})
}

// CreateVolume has a controller plugin create a volume and registers it.
// The answer has the registered volume (secrets redacted) and its index;
// a repeat whose capacity_min is more than recorded grows the volume
// instead, and Expanded says how far that got.
func (c *Client) CreateVolume(ctx context.Context, spec *structs.VolumeCreateSpec) (*structs.VolumeCreateResponse, error) {
	return call[structs.VolumeCreateResponse](ctx, c, "Volume.Create", &structs.VolumeCreateRequest{Volume: spec})
}

// DeleteVolume has a controller plugin delete an unclaimed volume and
// deregisters it.
func (c *Client) DeleteVolume(ctx context.Context, id string) (uint64, error) {
	return c.write(ctx, "Volume.Delete", &structs.VolumeDeleteRequest{VolumeID: id})
}

// ExpandVolume grows a volume to at least capacity bytes; the reply names
// nodes whose expansion is still pending.
func (c *Client) ExpandVolume(ctx context.Context, volumeID string, capacity int64) (*structs.VolumeExpandResponse, error) {
	return call[structs.VolumeExpandResponse](ctx, c, "Volume.Expand", &structs.VolumeExpandRequest{VolumeID: volumeID, Capacity: capacity})
}

// Volume reads one volume.
func (c *Client) Volume(ctx context.Context, id string, q structs.QueryOptions) (*structs.Volume, structs.QueryMeta, error) {
	out, err := call[structs.VolumeResponse](ctx, c, "Volume.Get", &structs.VolumeSpecificRequest{ID: id, QueryOptions: q})
	return out.Volume, out.QueryMeta, err
}

// Volumes lists volumes, optionally of one plugin.
func (c *Client) Volumes(ctx context.Context, pluginID string, q structs.QueryOptions) ([]*structs.Volume, structs.QueryMeta, error) {
	out, err := call[structs.VolumeListResponse](ctx, c, "Volume.List", &structs.VolumeListRequest{PluginID: pluginID, QueryOptions: q})
	return out.Volumes, out.QueryMeta, err
}

// Claim claims a volume for an allocation (or, with req.Release, releases
// the claim: see Release).
func (c *Client) Claim(ctx context.Context, req *structs.VolumeClaimRequest) (*structs.VolumeClaimResponse, error) {
	return call[structs.VolumeClaimResponse](ctx, c, "Volume.Claim", req)
}

// Release releases an allocation's claim on a volume: Volume.Claim with
// Release set.
func (c *Client) Release(ctx context.Context, volumeID, allocID string) (*structs.VolumeClaimResponse, error) {
	return c.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: volumeID, AllocID: allocID, Release: true})
}

// DetachVolume releases the claims a node holds on a volume now; force
// skips the node detach for a node that is gone for good.
func (c *Client) DetachVolume(ctx context.Context, volumeID, nodeID string, force bool) (*structs.VolumeDetachResponse, error) {
	return call[structs.VolumeDetachResponse](ctx, c, "Volume.Detach", &structs.VolumeDetachRequest{VolumeID: volumeID, NodeID: nodeID, Force: force})
}

// ModifyVolume changes a volume's mutable parameters through its
// controller (CSI MODIFY_VOLUME) and records them.
func (c *Client) ModifyVolume(ctx context.Context, volumeID string, params map[string]string) (*structs.VolumeModifyResponse, error) {
	return call[structs.VolumeModifyResponse](ctx, c, "Volume.Modify", &structs.VolumeModifyRequest{VolumeID: volumeID, MutableParameters: params})
}
