package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// ReconcileVolumes compares the storage with claimd's record now and
// records the rounds: of volumeID's plugin, or of every plugin with a
// controller when volumeID is empty.
func (c *Client) ReconcileVolumes(ctx context.Context, volumeID string) (*structs.VolumeReconcileResponse, error) {
	return call[structs.VolumeReconcileResponse](ctx, c, "Volume.Reconcile", &structs.VolumeReconcileRequest{VolumeID: volumeID})
}

// StorageReports reads the last reconciliation round of every plugin, or
// of one.
func (c *Client) StorageReports(ctx context.Context, pluginID string, q structs.QueryOptions) ([]*structs.StorageReport, structs.QueryMeta, error) {
	out, err := call[structs.StorageReportListResponse](ctx, c, "Volume.StorageReports", &structs.StorageReportListRequest{PluginID: pluginID, QueryOptions: q})
	return out.Reports, out.QueryMeta, err
}

// VolumeStorage asks what the storage says of one volume now (nothing is
// recorded).
func (c *Client) VolumeStorage(ctx context.Context, volumeID string) (*structs.VolumeStorageResponse, error) {
	return call[structs.VolumeStorageResponse](ctx, c, "Volume.Storage", &structs.VolumeStorageRequest{VolumeID: volumeID})
}

// VolumeUsage asks every node holding a live claim on the volume for its
// usage now (nothing is recorded).
func (c *Client) VolumeUsage(ctx context.Context, volumeID string) ([]*structs.VolumeUsage, error) {
	out, err := call[structs.VolumeUsageResponse](ctx, c, "Volume.Usage", &structs.VolumeUsageRequest{VolumeID: volumeID})
	return out.Usage, err
}
