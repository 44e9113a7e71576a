package csi

import (
	"maps"

	"github.com/claimd/claimd/structs"
)

// Structs converts the controller capabilities into the form nodes register
// and the plugin table shows.
func (c ControllerCapabilities) Structs() *structs.CSIControllerCapabilities {
	return &structs.CSIControllerCapabilities{
		CreateDeleteVolume:   c.CreateDeleteVolume,
		PublishUnpublish:     c.PublishUnpublishVolume,
		PublishReadOnly:      c.PublishReadOnly,
		CreateDeleteSnapshot: c.CreateDeleteSnapshot,
		ListSnapshots:        c.ListSnapshots,
		ExpandVolume:         c.ExpandVolume,
		ListVolumes:          c.ListVolumes,
		GetCapacity:          c.GetCapacity,
		CloneVolume:          c.CloneVolume,
		ListPublishedNodes:   c.ListPublishedNodes,
		GetVolume:            c.GetVolume,
		VolumeHealth:         c.VolumeHealth,
		ListVolumeHealth:     c.ListVolumeHealth,
		ModifyVolume:         c.ModifyVolume,
	}
}

// Structs converts the node capabilities into the form nodes register and
// the plugin table shows.
func (c NodeCapabilities) Structs() *structs.CSINodeCapabilities {
	return &structs.CSINodeCapabilities{
		StageUnstageVolume:    c.StageUnstageVolume,
		ExpandVolume:          c.ExpandVolume,
		GetVolumeStats:        c.GetVolumeStats,
		VolumeHealth:          c.VolumeHealth,
		SingleNodeMultiWriter: c.SingleNodeMultiWriter,
	}
}

// NodeInfo is the fingerprint as the node's plugin instance registers it
// (nil when the plugin does not run a node service here).
func (f PluginFingerprint) NodeInfo() *structs.CSIInfo {
	if !f.Type.HasNode() {
		return nil
	}
	i := f.baseInfo()
	i.ExternalNodeID = f.NodeExternalID
	i.MaxVolumes = f.MaxVolumes
	if len(f.AccessibleTopology) > 0 {
		i.AccessibleTopology = maps.Clone(f.AccessibleTopology)
	}
	if f.everFingerprinted() {
		i.NodeCapabilities = f.NodeCaps.Structs()
	}
	return i
}

// ControllerInfo is the fingerprint as the node's controller instance
// registers it (nil when the plugin does not run a controller here).
func (f PluginFingerprint) ControllerInfo() *structs.CSIInfo {
	if !f.Type.HasController() {
		return nil
	}
	i := f.baseInfo()
	if f.everFingerprinted() {
		i.ControllerCapabilities = f.ControllerCaps.Structs()
	}
	return i
}

// baseInfo holds what both instances report. Node instances report
// RequiresControllerPlugin too: the plugin table derives it from every
// instance, so losing all controllers must not make claims look like they
// need no ControllerPublish.
func (f PluginFingerprint) baseInfo() *structs.CSIInfo {
	return &structs.CSIInfo{
		// A probe's error can be long; the servers refuse a fingerprint
		// over structs.MaxFingerprintText.
		PluginID: f.ID, Healthy: f.Healthy, HealthDescription: structs.ClipText(f.HealthDescription, structs.MaxHealthDescription),
		Provider: f.Name, ProviderVersion: f.Version,
		RequiresControllerPlugin: f.RequiresControllerPublish,
	}
}

// everFingerprinted: the capability calls have answered at least once. A
// plugin that never did reports no capabilities rather than "none".
func (f PluginFingerprint) everFingerprinted() bool { return f.Name != "" }
