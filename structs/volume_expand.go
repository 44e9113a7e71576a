package structs

import "fmt"

// VolumeExpandRequest asks the leader to grow a volume to at least
// Capacity bytes: ControllerExpandVolume, the new size in one entry, then
// NodeExpandVolume on every node that has the volume staged or published.
type VolumeExpandRequest struct {
	VolumeID string
	// Capacity is the size wanted in bytes (CSI's required_bytes).
	Capacity int64
	WriteRequest
}

// Validate checks the request before anything is sent to a plugin.
func (r *VolumeExpandRequest) Validate() error {
	if err := ValidateID("volume_id", r.VolumeID); err != nil {
		return err
	}
	if r.Capacity <= 0 {
		return Invalid("capacity", fmt.Sprintf("%d must be a positive number of bytes", r.Capacity))
	}
	return nil
}

// VolumeExpandResponse says how far the expansion got, with the volume as
// recorded afterwards.
type VolumeExpandResponse struct {
	Volume *Volume
	VolumeExpansion
	WriteMeta
}

// VolumeExpansion is how far growing one volume got, by `volume expand` or
// by a register or create asking for more than is recorded. The capacity
// is recorded once the controller grew the volume; NodesExpanded lists the
// nodes that grew their view of it, and NodesPending those that still must
// (down, or their plugin failed), with the reason: run the expand again
// once they are back (every step is idempotent).
type VolumeExpansion struct {
	VolumeID string
	// Previous is the size recorded before, Capacity the size now, and
	// CapacityIndex the index of the entry that recorded it.
	Previous      int64
	Capacity      int64
	CapacityIndex uint64
	NodesExpanded []string
	NodesPending  map[string]string
}

// VolumeCapacityRequest is the log entry that records a grown volume's
// size. The state machine only ever raises a volume's capacity, so two
// expansions finishing out of order keep the larger size; ExternalID
// guards against the volume having been replaced meanwhile.
type VolumeCapacityRequest struct {
	VolumeID   string
	ExternalID string
	Capacity   int64
	WriteRequest
}

// ClientCSIControllerExpandRequest asks a controller plugin to grow a
// volume (ControllerExpandVolume).
type ClientCSIControllerExpandRequest struct {
	CSIControllerQuery
	VolumeID       string // claimd's volume ID, for logs
	ExternalID     string
	Capacity       int64
	CapacityMax    int64
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
	MountOptions   *MountOptions
	Secrets        Secrets
	NodeRouting
}

// ClientCSIControllerExpandResponse is the size the plugin reports and
// whether nodes must grow their view too.
type ClientCSIControllerExpandResponse struct {
	Capacity              int64
	NodeExpansionRequired bool
	ControllerNodeID      string
}

// ClientCSINodeExpandRequest asks a client node to run NodeExpandVolume
// for a volume wherever it has it staged or published.
type ClientCSINodeExpandRequest struct {
	NodeID      string
	PluginID    string
	VolumeID    string
	ExternalID  string
	Capacity    int64
	CapacityMax int64
	NodeRouting
}

// ClientCSINodeExpandResponse counts the paths the node expanded (0: the
// volume is not mounted there any more, which is success).
type ClientCSINodeExpandResponse struct {
	Paths    int
	Capacity int64
}
