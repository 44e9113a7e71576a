package structs

import (
	"fmt"
	"time"
)

// Storage truth (issue 27): where claimd's record of attachments and what
// the storage reports disagree. The leader asks each plugin's controller
// (ListVolumes with published nodes) and records what it found in Raft, so
// every server, the CLI and the UI show the same findings.

// FindingKind says how the record and the storage disagree.
type FindingKind string

const (
	// FindingOrphan: the storage shows the volume published to a node,
	// and no live or releasing claim on that node explains it.
	FindingOrphan FindingKind = "orphan"
	// FindingMissing: a live claim is recorded as controller-published to
	// its node, and the storage does not show that attachment.
	FindingMissing FindingKind = "missing"
	// FindingUnknownVolume: the storage has a volume claimd does not know.
	// Listed, never touched.
	FindingUnknownVolume FindingKind = "unknown-volume"
	// FindingAbnormal: the storage reports adverse conditions of a known
	// volume (CSI volume health); Message says which.
	FindingAbnormal FindingKind = "abnormal"
)

// StorageVolume is one volume as the storage reports it (ListVolumes,
// ControllerGetVolume): the other side of claimd's record.
type StorageVolume struct {
	ExternalID string `json:"external_id"`
	Capacity   int64  `json:"capacity,omitempty"`
	// PublishedNodes are the plugin's node IDs the volume is
	// controller-published to (LIST_VOLUMES_PUBLISHED_NODES).
	PublishedNodes []string `json:"published_nodes,omitempty"`
}

// StorageFinding is one disagreement.
type StorageFinding struct {
	Kind FindingKind `json:"kind"`
	// VolumeID is claimd's volume ("" for an unknown volume).
	VolumeID   string `json:"volume_id,omitempty"`
	ExternalID string `json:"external_id"`
	// NodeID is claimd's node, when the plugin's node ID maps to one.
	NodeID         string `json:"node_id,omitempty"`
	ExternalNodeID string `json:"external_node_id,omitempty"`
	// AllocID is the claim's allocation (missing attachments).
	AllocID string `json:"alloc_id,omitempty"`
	// Message is what the storage said (abnormal volumes).
	Message string `json:"message,omitempty"`
	// FirstSeen is when a round first found it; it is kept while every
	// later round finds it again, and is what a repair's grace counts from.
	FirstSeen time.Time `json:"first_seen"`
	// RepairedAt is when claimd detached an orphan (it is then gone from
	// the next round).
	RepairedAt time.Time `json:"repaired_at,omitzero"`
}

// Key identifies a finding across rounds.
func (f *StorageFinding) Key() string {
	return string(f.Kind) + "/" + f.ExternalID + "/" + f.ExternalNodeID + "/" + f.AllocID
}

// StorageReport is one reconciliation round of one plugin.
type StorageReport struct {
	PluginID string `json:"plugin_id"`
	// CheckedAt is when the round listed the storage; ControllerNodeID is
	// the node whose controller answered.
	CheckedAt        time.Time `json:"checked_at"`
	ControllerNodeID string    `json:"controller_node_id,omitempty"`
	// Volumes is how many of the plugin's volumes the storage listed, and
	// Known how many of those claimd knows.
	Volumes int `json:"volumes"`
	Known   int `json:"known"`
	// Unsupported says why the round could not compare (the controller
	// lacks LIST_VOLUMES or LIST_VOLUMES_PUBLISHED_NODES); Error is a round
	// that failed. Findings from the last good round are kept then.
	Unsupported string            `json:"unsupported,omitempty"`
	Error       string            `json:"error,omitempty"`
	Findings    []*StorageFinding `json:"findings,omitempty"`
	// UnknownTruncated counts unknown volumes left out of Findings.
	UnknownTruncated int `json:"unknown_truncated,omitempty"`

	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// MaxStorageFindings bounds one report: a storage with thousands of
// volumes claimd does not know must not bloat the replicated state.
const MaxStorageFindings = 1000

// MaxUnknownVolumes bounds the unknown volumes listed in one report.
const MaxUnknownVolumes = 100

// Validate checks a report before it goes into Raft.
func (r *StorageReport) Validate() error {
	if err := ValidateID("plugin_id", r.PluginID); err != nil {
		return err
	}
	if len(r.Findings) > MaxStorageFindings {
		return Invalid("findings", fmt.Sprintf("has %d entries, at most %d allowed", len(r.Findings), MaxStorageFindings))
	}
	if len(r.Error) > maxFingerprintSz || len(r.Unsupported) > maxFingerprintSz {
		return Invalid("error", fmt.Sprintf("longer than %d bytes", maxFingerprintSz))
	}
	for i, f := range r.Findings {
		field := fmt.Sprintf("findings[%d]", i)
		if f == nil {
			return Invalid(field, "must not be null")
		}
		switch f.Kind {
		case FindingOrphan, FindingMissing, FindingUnknownVolume, FindingAbnormal:
		default:
			return Invalid(field+".kind", fmt.Sprintf("%q is not %q, %q, %q or %q", f.Kind, FindingOrphan, FindingMissing, FindingUnknownVolume, FindingAbnormal))
		}
		if len(f.Message) > maxVolumeValueLen {
			return Invalid(field+".message", fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
		}
		if f.ExternalID == "" || len(f.ExternalID) > maxVolumeValueLen {
			return Invalid(field+".external_id", fmt.Sprintf("must be 1 to %d bytes", maxVolumeValueLen))
		}
		if len(f.ExternalNodeID) > maxVolumeValueLen {
			return Invalid(field+".external_node_id", fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
		}
	}
	return nil
}

// Copy returns a deep copy.
func (r *StorageReport) Copy() *StorageReport {
	if r == nil {
		return nil
	}
	c := *r
	c.Findings = make([]*StorageFinding, len(r.Findings))
	for i, f := range r.Findings {
		ff := *f
		c.Findings[i] = &ff
	}
	return &c
}

// ForVolume returns the findings about one claimd volume.
func (r *StorageReport) ForVolume(volumeID string) []*StorageFinding {
	if r == nil {
		return nil
	}
	var out []*StorageFinding
	for _, f := range r.Findings {
		if f.VolumeID == volumeID {
			out = append(out, f)
		}
	}
	return out
}

// ClientCSIControllerListVolumesRequest asks a controller plugin what the
// storage holds: every volume (ListVolumes, all pages), or one when
// ExternalID is set (ControllerGetVolume, which the plugin must offer).
type ClientCSIControllerListVolumesRequest struct {
	CSIControllerQuery
	ExternalID string
	NodeRouting
}

// ClientCSIControllerListVolumesResponse is the storage's answer, with
// what the controller can report: published nodes only when
// PublishedNodes is set (otherwise a volume's empty list means nothing).
type ClientCSIControllerListVolumesResponse struct {
	Volumes        []*StorageVolume
	PublishedNodes bool
	// Health are the adverse conditions of volumes that have any, by
	// external ID, when the controller reports volume health.
	Health           map[string][]string
	ControllerNodeID string
}

// StorageRepair is one orphan attachment reconciliation detached.
type StorageRepair struct {
	// At is when the controller detach was done; FirstSeen when the
	// orphan was first found (the grace ran from then).
	At             time.Time `json:"at"`
	FirstSeen      time.Time `json:"first_seen"`
	ExternalNodeID string    `json:"external_node_id"`
	NodeID         string    `json:"node_id,omitempty"`
}

// VolumeRepair is a repair to record on a volume.
type VolumeRepair struct {
	VolumeID string
	Repair   *StorageRepair
}

// StorageReportRequest records one reconciliation round of a plugin, and
// the repairs it made.
type StorageReportRequest struct {
	Report  *StorageReport
	Repairs []*VolumeRepair
	WriteRequest
}

// VolumeReconcileRequest runs a reconciliation round now: of the plugin of
// VolumeID, of PluginID, or of every plugin with a controller when both
// are empty.
type VolumeReconcileRequest struct {
	VolumeID string
	PluginID string
	WriteRequest
}

// Validate names the field at fault.
func (r *VolumeReconcileRequest) Validate() error {
	if r.VolumeID != "" {
		if err := ValidateID("volume_id", r.VolumeID); err != nil {
			return err
		}
	}
	if r.PluginID != "" {
		if err := ValidateID("plugin_id", r.PluginID); err != nil {
			return err
		}
	}
	if r.VolumeID != "" && r.PluginID != "" {
		return Invalid("plugin_id", "give a volume or a plugin, not both")
	}
	return nil
}

// VolumeReconcileResponse carries the rounds recorded.
type VolumeReconcileResponse struct {
	Reports []*StorageReport
	Index   uint64
}

// StorageReportListRequest reads the last rounds (all plugins, or one).
type StorageReportListRequest struct {
	PluginID string
	QueryOptions
}

// StorageReportListResponse carries them, by plugin ID.
type StorageReportListResponse struct {
	Reports []*StorageReport
	QueryMeta
}

// VolumeStorageRequest asks what the storage says of one volume now
// (ControllerGetVolume, or ListVolumes filtered), without recording it:
// shown before an operator forces a detach or a deregister.
type VolumeStorageRequest struct {
	VolumeID string
	QueryOptions
}

// VolumeStorageResponse is the storage's view: Found is false when the
// storage does not list the volume; PublishedNodes maps each plugin node
// ID the volume is attached to onto claimd's node ID ("" when unknown).
// Supported is false when the controller cannot report attachments.
type VolumeStorageResponse struct {
	Found            bool
	Supported        bool
	Volume           *StorageVolume
	PublishedNodes   map[string]string
	ControllerNodeID string
	QueryMeta
}
