package structs

import (
	"fmt"
	"time"
)

// Snapshots are not part of the replicated state: the controller plugin
// that made them is their only record (decision 32), and every request
// here is answered by asking it.

// Snapshot is one snapshot as a controller plugin lists it.
type Snapshot struct {
	PluginID string `json:"plugin_id"`
	// ID is the plugin's snapshot ID: what `volume create` takes as
	// snapshot_id and `volume snapshot delete` as SNAPSHOT_ID.
	ID string `json:"id"`
	// SourceExternalID is the plugin's ID of the volume it was taken of;
	// SourceVolumeID is claimd's ID of that volume when it is registered.
	SourceExternalID string    `json:"source_external_id"`
	SourceVolumeID   string    `json:"source_volume_id,omitempty"`
	SizeBytes        int64     `json:"size_bytes,omitempty"`
	CreateTime       time.Time `json:"create_time,omitzero"`
	ReadyToUse       bool      `json:"ready_to_use"`
}

// VolumeSnapshotCreateRequest asks the leader to have a controller plugin
// snapshot a registered volume. Name makes the call idempotent (CSI): a
// repeat answers with the snapshot the first call made.
type VolumeSnapshotCreateRequest struct {
	VolumeID   string
	Name       string
	Parameters map[string]string
	WriteRequest
}

// Validate checks the request before anything is sent to a plugin.
func (r *VolumeSnapshotCreateRequest) Validate() error {
	if err := ValidateID("volume_id", r.VolumeID); err != nil {
		return err
	}
	if err := ValidateID("name", r.Name); err != nil {
		return err
	}
	return validateStringMap("parameters", r.Parameters)
}

// VolumeSnapshotCreateResponse carries the plugin's snapshot.
type VolumeSnapshotCreateResponse struct {
	Snapshot *Snapshot
}

// VolumeSnapshotDeleteRequest asks a controller plugin to delete a
// snapshot. Deleting one the plugin does not know is success (CSI).
type VolumeSnapshotDeleteRequest struct {
	PluginID   string
	SnapshotID string
	WriteRequest
}

// Validate checks the request before anything is sent to a plugin.
func (r *VolumeSnapshotDeleteRequest) Validate() error {
	if err := ValidateID("plugin_id", r.PluginID); err != nil {
		return err
	}
	return validateExternalID("snapshot_id", r.SnapshotID)
}

// VolumeSnapshotListRequest lists the snapshots of one plugin, or of every
// plugin that advertises LIST_SNAPSHOTS when PluginID is empty. It is
// served by the leader, as every controller call is, so it carries a
// WriteRequest although it writes nothing.
type VolumeSnapshotListRequest struct {
	PluginID string
	WriteRequest
}

// VolumeSnapshotListResponse carries the snapshots sorted by plugin and ID.
// Unreachable names the plugins (all of them only when PluginID was empty)
// whose controllers could not be asked, with the reason, so a partial list
// never passes for a whole one.
type VolumeSnapshotListResponse struct {
	Snapshots   []*Snapshot       `json:"snapshots"`
	Unreachable map[string]string `json:"unreachable,omitempty"`
}

// maxExternalIDLen bounds IDs that a plugin made (CSI allows any string
// the plugin likes, so they are not held to ValidateID).
const maxExternalIDLen = 1024

func validateExternalID(field, id string) error {
	if id == "" {
		return Invalid(field, "must not be empty")
	}
	if len(id) > maxExternalIDLen {
		return Invalid(field, fmt.Sprintf("longer than %d bytes", maxExternalIDLen))
	}
	// Printable and no ".." element, as a volume's external ID (text.go).
	return validateStorageIDText(field, id, maxExternalIDLen)
}

// ClientCSIControllerSnapshotRequest asks a controller plugin to snapshot
// a volume (CreateSnapshot).
type ClientCSIControllerSnapshotRequest struct {
	CSIControllerQuery
	Name             string
	SourceExternalID string
	Parameters       map[string]string
	Secrets          Secrets
	NodeRouting
}

// ClientCSIControllerSnapshotResponse is the plugin's snapshot.
type ClientCSIControllerSnapshotResponse struct {
	Snapshot         *Snapshot
	ControllerNodeID string
}

// ClientCSIControllerSnapshotDeleteRequest asks a controller plugin to
// delete a snapshot (DeleteSnapshot).
type ClientCSIControllerSnapshotDeleteRequest struct {
	CSIControllerQuery
	SnapshotID string
	NodeRouting
}

// ClientCSIControllerSnapshotDeleteResponse is empty: success is the
// answer.
type ClientCSIControllerSnapshotDeleteResponse struct {
	ControllerNodeID string
}

// ClientCSIControllerSnapshotListRequest asks a controller plugin for its
// snapshots (ListSnapshots, every page up to a bound).
type ClientCSIControllerSnapshotListRequest struct {
	CSIControllerQuery
	NodeRouting
}

// ClientCSIControllerSnapshotListResponse carries the plugin's snapshots
// (PluginID and SourceVolumeID left for the server to fill in).
type ClientCSIControllerSnapshotListResponse struct {
	Snapshots        []*Snapshot
	ControllerNodeID string
}
