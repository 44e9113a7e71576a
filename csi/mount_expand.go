package csi

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/claimd/claimd/structs"
)

// NodeExpander is a node plugin that can grow its view of a volume
// (NODE EXPAND_VOLUME). *Client implements it; the mount manager's fakes
// need not.
type NodeExpander interface {
	NodeExpandVolume(ctx context.Context, req *NodeExpandRequest) (int64, error)
}

// ExpandVolume runs NodeExpandVolume wherever this node presents a volume:
// once per staging path when the plugin stages (the allocations' publish
// targets share the staged filesystem), otherwise once per publish target.
// It holds the volume's lock, so no mount or unmount runs meanwhile. A path
// the plugin says does not show the volume (NotFound: a mount that never
// completed) is skipped. It returns how many paths were expanded and the
// largest size the plugin reported; a volume not in use here is 0 paths
// and success.
func (m *MountManager) ExpandVolume(ctx context.Context, volID, externalID string, capacity, capacityMax int64) (int, int64, error) {
	ex, ok := m.cfg.Plugin.(NodeExpander)
	if !ok {
		return 0, 0, structs.Invalid("plugin_id", fmt.Sprintf("node plugin %q cannot expand volumes", m.cfg.PluginID))
	}
	if err := structs.ValidateID("volume_id", volID); err != nil {
		return 0, 0, err
	}
	unlock, err := m.locks.lock(ctx, volID)
	if err != nil {
		return 0, 0, structs.NewError(structs.CodeTimeout, "waiting to expand volume "+volID+": "+err.Error())
	}
	defer unlock()

	paths, size := 0, int64(0)
	for _, r := range m.expandTargets(volID) {
		req := &NodeExpandRequest{VolumeID: externalID, VolumePath: r.TargetPath, Capacity: capacity, CapacityMax: capacityMax,
			Capability: VolumeCapability{AccessMode: r.AccessMode, AttachmentMode: r.AttachmentMode}}
		if m.cfg.RequiresStaging {
			req.StagingPath = r.StagingPath
		}
		got, err := ex.NodeExpandVolume(ctx, req)
		if errors.Is(err, structs.ErrNotFound) {
			m.logger.Debug("volume not presented at path, not expanding there", "volume", volID, "path", r.TargetPath)
			continue
		}
		if err != nil {
			return paths, size, fmt.Errorf("expand volume %s at %s: %w", volID, r.TargetPath, err)
		}
		paths, size = paths+1, max(size, got)
	}
	m.logger.Info("volume expanded on this node", "volume", volID, "paths", paths, "capacity", size)
	return paths, size, nil
}

// expandTargets picks one usage per staging path (the lowest target path,
// so repeats pick the same), or every usage when the plugin does not stage.
func (m *MountManager) expandTargets(volID string) []usageRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	recs := make([]usageRecord, 0, len(m.usages[volID]))
	for _, r := range m.usages[volID] {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].TargetPath < recs[j].TargetPath })
	if !m.cfg.RequiresStaging {
		return recs
	}
	seen := make(map[string]bool, len(recs))
	out := recs[:0]
	for _, r := range recs {
		if !seen[r.StagingPath] {
			seen[r.StagingPath] = true
			out = append(out, r)
		}
	}
	return out
}
