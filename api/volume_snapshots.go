package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// CSI snapshots of volumes (Volume.Snapshot*), taken by the volumes'
// controller plugins. Archives of the cluster's state are in
// operator_snapshot.go.

// CreateSnapshot has the volume's controller plugin snapshot it; a repeat
// with the same name returns the same snapshot.
func (c *Client) CreateSnapshot(ctx context.Context, volumeID, name string, params map[string]string) (*structs.Snapshot, error) {
	out, err := call[structs.VolumeSnapshotCreateResponse](ctx, c, "Volume.SnapshotCreate",
		&structs.VolumeSnapshotCreateRequest{VolumeID: volumeID, Name: name, Parameters: params})
	return out.Snapshot, err
}

// DeleteSnapshot has a plugin's controller delete a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, pluginID, snapshotID string) error {
	_, err := c.write(ctx, "Volume.SnapshotDelete", &structs.VolumeSnapshotDeleteRequest{PluginID: pluginID, SnapshotID: snapshotID})
	return err
}

// Snapshots lists the snapshots of one plugin, or of every plugin that can
// list them when pluginID is empty (then Unreachable names plugins that
// could not be asked).
func (c *Client) Snapshots(ctx context.Context, pluginID string) (*structs.VolumeSnapshotListResponse, error) {
	return call[structs.VolumeSnapshotListResponse](ctx, c, "Volume.SnapshotList", &structs.VolumeSnapshotListRequest{PluginID: pluginID})
}
