package structs

import (
	"fmt"
	"maps"
	"strings"
)

// CSIControllerCapabilities is what a controller plugin's
// ControllerGetCapabilities advertises, reduced to what claimd or an
// operator acts on. It is shown by `claimd plugin status` so an operator can
// see why a command that needs one of them is refused.
type CSIControllerCapabilities struct {
	CreateDeleteVolume   bool `json:"create_delete_volume,omitempty"`
	PublishUnpublish     bool `json:"publish_unpublish,omitempty"`
	PublishReadOnly      bool `json:"publish_readonly,omitempty"`
	CreateDeleteSnapshot bool `json:"create_delete_snapshot,omitempty"`
	ListSnapshots        bool `json:"list_snapshots,omitempty"`
	ExpandVolume         bool `json:"expand_volume,omitempty"`
	ListVolumes          bool `json:"list_volumes,omitempty"`
	GetCapacity          bool `json:"get_capacity,omitempty"`
	CloneVolume          bool `json:"clone_volume,omitempty"`
	// ListPublishedNodes: ListVolumes reports each volume's published
	// nodes, which reconciliation compares with claimd's attachments.
	ListPublishedNodes bool `json:"list_published_nodes,omitempty"`
	// GetVolume: ControllerGetVolume answers for one volume.
	GetVolume bool `json:"get_volume,omitempty"`
	// VolumeHealth: ControllerGetVolumeHealth (GET_VOLUME_HEALTH) and,
	// with ListVolumeHealth, ControllerListVolumeHealth answer (CSI 1.13
	// replaced the older VOLUME_CONDITION with these).
	VolumeHealth     bool `json:"volume_health,omitempty"`
	ListVolumeHealth bool `json:"list_volume_health,omitempty"`
	// ModifyVolume: ControllerModifyVolume changes mutable parameters.
	ModifyVolume bool `json:"modify_volume,omitempty"`
}

// Names lists the advertised capabilities in a fixed order, for display.
func (c *CSIControllerCapabilities) Names() []string {
	if c == nil {
		return nil
	}
	return capabilityNames([]namedCap{
		{"create_delete_volume", c.CreateDeleteVolume}, {"publish_unpublish", c.PublishUnpublish},
		{"publish_readonly", c.PublishReadOnly}, {"create_delete_snapshot", c.CreateDeleteSnapshot},
		{"list_snapshots", c.ListSnapshots}, {"expand_volume", c.ExpandVolume},
		{"list_volumes", c.ListVolumes}, {"get_capacity", c.GetCapacity}, {"clone_volume", c.CloneVolume},
		{"list_published_nodes", c.ListPublishedNodes}, {"get_volume", c.GetVolume},
		{"volume_health", c.VolumeHealth}, {"list_volume_health", c.ListVolumeHealth}, {"modify_volume", c.ModifyVolume},
	})
}

// Copy returns a copy (the struct holds no references).
func (c *CSIControllerCapabilities) Copy() *CSIControllerCapabilities {
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}

// CSINodeCapabilities is what a node plugin's NodeGetCapabilities
// advertises, reduced to what claimd or an operator acts on.
type CSINodeCapabilities struct {
	StageUnstageVolume bool `json:"stage_unstage_volume,omitempty"`
	ExpandVolume       bool `json:"expand_volume,omitempty"`
	GetVolumeStats     bool `json:"get_volume_stats,omitempty"`
	// VolumeHealth: NodeGetVolumeHealth answers (GET_VOLUME_HEALTH).
	VolumeHealth bool `json:"volume_health,omitempty"`
	// SingleNodeMultiWriter: the plugin takes the single-node-single-writer
	// and single-node-multi-writer access modes (CSI 1.5).
	SingleNodeMultiWriter bool `json:"single_node_multi_writer,omitempty"`
}

// Names lists the advertised capabilities in a fixed order, for display.
func (c *CSINodeCapabilities) Names() []string {
	if c == nil {
		return nil
	}
	return capabilityNames([]namedCap{
		{"stage_unstage_volume", c.StageUnstageVolume}, {"expand_volume", c.ExpandVolume},
		{"get_volume_stats", c.GetVolumeStats}, {"volume_health", c.VolumeHealth},
		{"single_node_multi_writer", c.SingleNodeMultiWriter},
	})
}

// Copy returns a copy (the struct holds no references).
func (c *CSINodeCapabilities) Copy() *CSINodeCapabilities {
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}

type namedCap struct {
	name string
	on   bool
}

func capabilityNames(all []namedCap) []string {
	var out []string
	for _, c := range all {
		if c.on {
			out = append(out, c.name)
		}
	}
	return out
}

// FormatSegments renders topology segments as "k1=v1,k2=v2" in key order,
// the same on every server (refusal messages are Apply results).
func FormatSegments(seg map[string]string) string {
	parts := make([]string, 0, len(seg))
	for _, k := range SortedKeys(seg) {
		parts = append(parts, k+"="+seg[k])
	}
	return strings.Join(parts, ",")
}

// validateSegments bounds one topology segments map: a node or an operator
// must not bloat the replicated state through it, and an empty key or an
// empty map could never mean anything a CSI plugin reports.
func validateSegments(field string, seg map[string]string, allowEmpty bool) error {
	if len(seg) == 0 && !allowEmpty {
		return Invalid(field, "must have at least one segment")
	}
	if len(seg) > maxVolumeMapEntries {
		return Invalid(field, fmt.Sprintf("has %d segments, at most %d allowed", len(seg), maxVolumeMapEntries))
	}
	for _, k := range SortedKeys(seg) {
		if k == "" {
			return Invalid(field, "segment keys must not be empty")
		}
		if len(k)+len(seg[k]) > maxVolumeValueLen {
			return Invalid(field+"."+k, fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
		}
	}
	return nil
}

func copySegments(seg map[string]string) map[string]string {
	if seg == nil {
		return nil
	}
	return maps.Clone(seg)
}
