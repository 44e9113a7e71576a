package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Ping checks that the server answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.Call(ctx, "Status.Ping", &structs.EmptyArgs{}, &struct{}{})
}

// Leader returns the leader's address as the connected server knows it.
func (c *Client) Leader(ctx context.Context) (string, error) {
	var out string
	err := c.Call(ctx, "Status.Leader", &structs.EmptyArgs{}, &out)
	return out, err
}

// Peers returns the Raft voters' addresses.
func (c *Client) Peers(ctx context.Context) ([]string, error) {
	var out []string
	err := c.Call(ctx, "Status.Peers", &structs.EmptyArgs{}, &out)
	return out, err
}

// RaftConfiguration lists the Raft members; stale answers locally.
func (c *Client) RaftConfiguration(ctx context.Context, stale bool) (*structs.RaftConfigurationResponse, error) {
	var out structs.RaftConfigurationResponse
	args := &structs.GenericRequest{QueryOptions: structs.QueryOptions{AllowStale: stale}}
	err := c.Call(ctx, "Operator.RaftGetConfiguration", args, &out)
	return &out, err
}

// RaftRemovePeer removes a server by ID or address.
func (c *Client) RaftRemovePeer(ctx context.Context, id, address string) error {
	return c.Call(ctx, "Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: id, Address: address}, &structs.GenericResponse{})
}

// TransferLeadership moves leadership to id ("" = any).
func (c *Client) TransferLeadership(ctx context.Context, id string) error {
	return c.Call(ctx, "Operator.TransferLeadership", &structs.TransferLeadershipRequest{ID: id}, &structs.GenericResponse{})
}

// RegisterVolumes creates or updates volumes and returns the commit index.
func (c *Client) RegisterVolumes(ctx context.Context, vols ...*structs.Volume) (uint64, error) {
	out, err := c.Register(ctx, vols...)
	return out.Index, err
}

// Register creates or updates volumes; the answer also says which
// registered volumes it grew (a spec asking for more capacity than
// recorded) and the nodes where that is still pending.
func (c *Client) Register(ctx context.Context, vols ...*structs.Volume) (*structs.VolumeRegisterResponse, error) {
	var out structs.VolumeRegisterResponse
	err := c.Call(ctx, "Volume.Register", &structs.VolumeRegisterRequest{Volumes: vols}, &out)
	return &out, err
}

// DeregisterVolumes removes volumes.
func (c *Client) DeregisterVolumes(ctx context.Context, force bool, ids ...string) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "Volume.Deregister", &structs.VolumeDeregisterRequest{VolumeIDs: ids, Force: force}, &out)
	return out.Index, err
}

// CreateVolume has a controller plugin create a volume and registers it;
// it returns the registered volume (secrets redacted).
func (c *Client) CreateVolume(ctx context.Context, spec *structs.VolumeCreateSpec) (*structs.Volume, uint64, error) {
	out, err := c.Create(ctx, spec)
	return out.Volume, out.Index, err
}

// Create is CreateVolume with the whole answer: a repeat whose
// capacity_min is more than recorded grows the volume, and Expanded says
// how far that got.
func (c *Client) Create(ctx context.Context, spec *structs.VolumeCreateSpec) (*structs.VolumeCreateResponse, error) {
	var out structs.VolumeCreateResponse
	err := c.Call(ctx, "Volume.Create", &structs.VolumeCreateRequest{Volume: spec}, &out)
	return &out, err
}

// DeleteVolume has a controller plugin delete an unclaimed volume and
// deregisters it.
func (c *Client) DeleteVolume(ctx context.Context, id string) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "Volume.Delete", &structs.VolumeDeleteRequest{VolumeID: id}, &out)
	return out.Index, err
}

// Volume reads one volume.
func (c *Client) Volume(ctx context.Context, id string, q structs.QueryOptions) (*structs.Volume, structs.QueryMeta, error) {
	var out structs.VolumeResponse
	err := c.Call(ctx, "Volume.Get", &structs.VolumeSpecificRequest{ID: id, QueryOptions: q}, &out)
	return out.Volume, out.QueryMeta, err
}

// Volumes lists volumes, optionally of one plugin.
func (c *Client) Volumes(ctx context.Context, pluginID string, q structs.QueryOptions) ([]*structs.Volume, structs.QueryMeta, error) {
	var out structs.VolumeListResponse
	err := c.Call(ctx, "Volume.List", &structs.VolumeListRequest{PluginID: pluginID, QueryOptions: q}, &out)
	return out.Volumes, out.QueryMeta, err
}

// StateDigest hashes the connected server's state machine.
func (c *Client) StateDigest(ctx context.Context) (*structs.StateDigest, error) {
	var out structs.StateDigest
	err := c.Call(ctx, "Status.StateDigest", &structs.EmptyArgs{}, &out)
	return &out, err
}

// Runtime reports the connected server's goroutines and heap.
func (c *Client) Runtime(ctx context.Context) (*structs.RuntimeStats, error) {
	var out structs.RuntimeStats
	err := c.Call(ctx, "Status.Runtime", &structs.EmptyArgs{}, &out)
	return &out, err
}

// CreateSnapshot has the volume's controller plugin snapshot it; a repeat
// with the same name returns the same snapshot.
func (c *Client) CreateSnapshot(ctx context.Context, volumeID, name string, params map[string]string) (*structs.Snapshot, error) {
	var out structs.VolumeSnapshotCreateResponse
	err := c.Call(ctx, "Volume.SnapshotCreate", &structs.VolumeSnapshotCreateRequest{VolumeID: volumeID, Name: name, Parameters: params}, &out)
	return out.Snapshot, err
}

// DeleteSnapshot has a plugin's controller delete a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, pluginID, snapshotID string) error {
	var out structs.GenericResponse
	return c.Call(ctx, "Volume.SnapshotDelete", &structs.VolumeSnapshotDeleteRequest{PluginID: pluginID, SnapshotID: snapshotID}, &out)
}

// Snapshots lists the snapshots of one plugin, or of every plugin that can
// list them when pluginID is empty (then Unreachable names plugins that
// could not be asked).
func (c *Client) Snapshots(ctx context.Context, pluginID string) (*structs.VolumeSnapshotListResponse, error) {
	var out structs.VolumeSnapshotListResponse
	err := c.Call(ctx, "Volume.SnapshotList", &structs.VolumeSnapshotListRequest{PluginID: pluginID}, &out)
	return &out, err
}

// ExpandVolume grows a volume to at least capacity bytes; the reply names
// nodes whose expansion is still pending.
func (c *Client) ExpandVolume(ctx context.Context, volumeID string, capacity int64) (*structs.VolumeExpandResponse, error) {
	var out structs.VolumeExpandResponse
	err := c.Call(ctx, "Volume.Expand", &structs.VolumeExpandRequest{VolumeID: volumeID, Capacity: capacity}, &out)
	return &out, err
}
