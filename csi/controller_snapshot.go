package csi

import (
	"context"
	"time"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// SnapshotInfo is a snapshot as a controller plugin reports it.
type SnapshotInfo struct {
	ID               string
	SourceExternalID string
	SizeBytes        int64
	CreateTime       time.Time
	ReadyToUse       bool
}

func snapshotInfo(s *csipb.Snapshot) *SnapshotInfo {
	out := &SnapshotInfo{ID: s.GetSnapshotId(), SourceExternalID: s.GetSourceVolumeId(),
		SizeBytes: s.GetSizeBytes(), ReadyToUse: s.GetReadyToUse()}
	if t := s.GetCreationTime(); t != nil {
		out.CreateTime = t.AsTime().UTC()
	}
	return out
}

// CreateSnapshot runs CreateSnapshot. Name makes it idempotent: the plugin
// answers a repeated name with the snapshot it made the first time.
func (c *Client) CreateSnapshot(ctx context.Context, name, sourceExternalID string, params map[string]string,
	secrets structs.Secrets) (*SnapshotInfo, error) {
	resp, err := invoke(ctx, c, "CreateSnapshot", &csipb.CreateSnapshotRequest{
		Name: name, SourceVolumeId: sourceExternalID, Parameters: params, Secrets: secrets,
	}, c.controller.CreateSnapshot)
	if err != nil {
		return nil, err
	}
	if resp.GetSnapshot().GetSnapshotId() == "" {
		return nil, structs.NewError(structs.CodeUnavailable, "plugin answered CreateSnapshot without a snapshot_id")
	}
	return snapshotInfo(resp.GetSnapshot()), nil
}

// DeleteSnapshot runs DeleteSnapshot. CSI makes a snapshot the plugin does
// not know a success, so a retry after a lost answer is one too.
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	_, err := invoke(ctx, c, "DeleteSnapshot", &csipb.DeleteSnapshotRequest{SnapshotId: snapshotID},
		c.controller.DeleteSnapshot)
	return err
}

// MaxListedSnapshots bounds what ListSnapshots collects over all pages, so
// a plugin with a huge (or a looping) listing cannot exhaust the agent.
const MaxListedSnapshots = 10000

// ListSnapshots runs ListSnapshots page by page until the plugin has no
// more or MaxListedSnapshots are collected (truncated is then true).
func (c *Client) ListSnapshots(ctx context.Context) (snaps []*SnapshotInfo, truncated bool, err error) {
	token := ""
	for len(snaps) < MaxListedSnapshots {
		resp, err := invoke(ctx, c, "ListSnapshots", &csipb.ListSnapshotsRequest{
			StartingToken: token, MaxEntries: int32(min(1000, MaxListedSnapshots-len(snaps))),
		}, c.controller.ListSnapshots)
		if err != nil {
			return nil, false, err
		}
		for _, e := range resp.GetEntries() {
			if s := e.GetSnapshot(); s.GetSnapshotId() != "" {
				snaps = append(snaps, snapshotInfo(s))
			}
		}
		next := resp.GetNextToken()
		if next == "" || next == token || len(resp.GetEntries()) == 0 {
			return snaps, false, nil
		}
		token = next
	}
	return snaps, true, nil
}
