package client

import (
	"context"
	"fmt"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/structs"
)

// defaultUsageInterval is how often the agent measures the volumes it
// holds (NodeGetVolumeStats) for its usage gauges. A minute keeps the cost
// small for plugins whose stats walk the volume (hostdir does).
const defaultUsageInterval = time.Minute

// volumeStatsTimeout bounds one NodeGetVolumeStats call.
const volumeStatsTimeout = 30 * time.Second

// usageLoop sets the claimd.client.volume.* gauges of every volume this
// node holds whose node plugin advertises GET_VOLUME_STATS (issue 27).
// The gauges are the agent's own view, served at its /v1/metrics; `volume
// status` asks the nodes live instead (Volume.Usage).
func (a *Agent) usageLoop() {
	every := a.cfg.UsageInterval
	if every < 0 {
		return
	}
	if every == 0 {
		every = defaultUsageInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.measureUsage()
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Agent) measureUsage() {
	stats := map[string]bool{}
	for _, fp := range a.plugins.Fingerprints() {
		stats[fp.ID] = fp.Healthy && fp.NodeCaps.GetVolumeStats
	}
	for _, c := range a.held.list() {
		if !stats[c.PluginID] || c.MountPath == "" {
			continue
		}
		st, err := a.volumeStats(c.PluginID, c.ExternalID, c.MountPath)
		if err != nil {
			a.logger.Debug("volume usage not measured", "volume", c.VolumeID, "alloc", c.AllocID, "error", err)
			continue
		}
		labels := []metrics.Label{{Name: "volume", Value: c.VolumeID}, {Name: "alloc", Value: c.AllocID}, {Name: "plugin", Value: c.PluginID}}
		metrics.SetGaugeWithLabels([]string{"client", "volume", "bytes_used"}, float32(st.BytesUsed), labels)
		metrics.SetGaugeWithLabels([]string{"client", "volume", "bytes_available"}, float32(st.BytesAvailable), labels)
		metrics.SetGaugeWithLabels([]string{"client", "volume", "bytes_total"}, float32(st.BytesTotal), labels)
		if st.InodesTotal > 0 {
			metrics.SetGaugeWithLabels([]string{"client", "volume", "inodes_used"}, float32(st.InodesUsed), labels)
		}
	}
}

// volumeStats asks a node plugin for a volume's usage at path, bounded in
// time (both the gauges and Volume.Usage through csiEndpoint ask here).
func (a *Agent) volumeStats(pluginID, externalID, path string) (*csi.VolumeStats, error) {
	client, ok := a.plugins.Client(pluginID)
	if !ok {
		return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("node plugin %q is not configured on this node", pluginID))
	}
	ctx, cancel := context.WithTimeout(a.ctx, volumeStatsTimeout)
	defer cancel()
	st, err := client.NodeGetVolumeStats(ctx, externalID, path)
	if err != nil {
		return nil, pluginError(err)
	}
	return st, nil
}
