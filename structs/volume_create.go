package structs

import (
	"fmt"
)

// VolumeCapabilityRequest is one way a volume to be created must be usable:
// an access mode and an attachment mode (CSI's volume_capabilities).
type VolumeCapabilityRequest struct {
	AccessMode     AccessMode     `json:"access_mode"`
	AttachmentMode AttachmentMode `json:"attachment_mode"`
}

// VolumeTopologyRequest is where a volume to be created must (Required)
// and should preferably (Preferred) be reachable, as CSI's
// accessibility_requirements: each entry is one set of topology segments.
type VolumeTopologyRequest struct {
	Required  []map[string]string `json:"required,omitempty"`
	Preferred []map[string]string `json:"preferred,omitempty"`
}

// VolumeCreateSpec is what `claimd volume create FILE` reads: a volume for
// the plugin to make. Its ID is also the name claimd gives the plugin
// (CSI's CreateVolume is idempotent by name), so a retry after a lost
// answer or a leader change finds the same storage instead of making more.
type VolumeCreateSpec struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	PluginID string `json:"plugin_id"`
	// CapacityMin and CapacityMax are the size range in bytes (CSI's
	// required_bytes and limit_bytes); 0 leaves the bound to the plugin.
	CapacityMin int64 `json:"capacity_min,omitempty"`
	CapacityMax int64 `json:"capacity_max,omitempty"`
	// Capabilities: the first one is the registered volume's access and
	// attachment mode; the plugin must support every one.
	Capabilities []VolumeCapabilityRequest `json:"capabilities"`
	MountOptions *MountOptions             `json:"mount_options,omitempty"`
	Parameters   map[string]string         `json:"parameters,omitempty"`
	Secrets      Secrets                   `json:"secrets,omitempty"`
	Topology     *VolumeTopologyRequest    `json:"topology_request,omitempty"`
	// SnapshotID or CloneID (at most one) is the content source.
	SnapshotID string `json:"snapshot_id,omitempty"`
	CloneID    string `json:"clone_id,omitempty"`
}

// maxCreateCapabilities bounds the requested capabilities (there are only
// ten distinct access and attachment mode pairs).
const maxCreateCapabilities = 16

// Validate checks a create spec before anything is sent to a plugin.
// Errors name the field in the JSON spelling the operator wrote.
func (s *VolumeCreateSpec) Validate() error {
	if s == nil {
		return Invalid("volume", "must be given")
	}
	if err := ValidateID("id", s.ID); err != nil {
		return err
	}
	if err := ValidateID("plugin_id", s.PluginID); err != nil {
		return err
	}
	if s.CapacityMin < 0 {
		return Invalid("capacity_min", fmt.Sprintf("%d must not be negative", s.CapacityMin))
	}
	if s.CapacityMax < 0 {
		return Invalid("capacity_max", fmt.Sprintf("%d must not be negative", s.CapacityMax))
	}
	if s.CapacityMax > 0 && s.CapacityMin > s.CapacityMax {
		return Invalid("capacity_max", fmt.Sprintf("%d is less than capacity_min %d", s.CapacityMax, s.CapacityMin))
	}
	if len(s.Capabilities) == 0 {
		return Invalid("capabilities", "at least one access mode and attachment mode is required")
	}
	if len(s.Capabilities) > maxCreateCapabilities {
		return Invalid("capabilities", fmt.Sprintf("has %d entries, at most %d allowed", len(s.Capabilities), maxCreateCapabilities))
	}
	for i, c := range s.Capabilities {
		if !c.AccessMode.Valid() {
			return Invalid(fmt.Sprintf("capabilities[%d].access_mode", i), fmt.Sprintf("%q is not one of %v", c.AccessMode, AccessModes))
		}
		if !c.AttachmentMode.Valid() {
			return Invalid(fmt.Sprintf("capabilities[%d].attachment_mode", i), fmt.Sprintf("%q is not %q or %q",
				c.AttachmentMode, AttachmentModeFilesystem, AttachmentModeBlockDevice))
		}
	}
	if s.SnapshotID != "" && s.CloneID != "" {
		return Invalid("clone_id", "not allowed together with snapshot_id")
	}
	// Both are given to the plugin as CSI IDs (text.go).
	for _, id := range []struct{ field, id string }{{"snapshot_id", s.SnapshotID}, {"clone_id", s.CloneID}} {
		if id.id != "" {
			if err := validateExternalID(id.field, id.id); err != nil {
				return err
			}
		}
	}
	if s.Topology != nil {
		if err := validateTopology("topology_request.required", s.Topology.Required); err != nil {
			return err
		}
		if err := validateTopology("topology_request.preferred", s.Topology.Preferred); err != nil {
			return err
		}
	}
	// The rest is the registered volume's spec; check it as registration
	// would, with a placeholder for the external ID the plugin will give.
	v := s.Volume("pending", 0, nil, nil)
	return v.ValidateEntry()
}

// Volume is the volume to register once the plugin made it: external ID,
// capacity, volume context and accessible topology come from the plugin.
func (s *VolumeCreateSpec) Volume(externalID string, capacity int64, volCtx map[string]string, topology []map[string]string) *Volume {
	v := &Volume{
		ID: s.ID, Name: s.Name, ExternalID: externalID, PluginID: s.PluginID,
		MountOptions: s.MountOptions, Parameters: s.Parameters, Context: volCtx,
		Secrets: s.Secrets, Capacity: capacity, AccessibleTopology: topology,
	}
	if len(s.Capabilities) > 0 {
		v.AccessMode, v.AttachmentMode = s.Capabilities[0].AccessMode, s.Capabilities[0].AttachmentMode
	}
	return v.Copy()
}

// VolumeCreateRequest asks the leader to have a controller plugin create a
// volume and to register it.
type VolumeCreateRequest struct {
	Volume *VolumeCreateSpec
	WriteRequest
}

// VolumeCreateResponse carries the registered volume (secrets redacted).
// A repeated create whose capacity_min is more than the volume has grows
// it as `volume expand` does; Expanded says how far that got.
type VolumeCreateResponse struct {
	Volume   *Volume
	Expanded *VolumeExpansion
	WriteMeta
}

// VolumeDeleteRequest asks the leader to delete a volume's storage through
// its controller plugin and then deregister it.
type VolumeDeleteRequest struct {
	VolumeID string
	WriteRequest
}

// ClientCSIControllerCreateRequest asks a controller plugin to create a
// volume (CreateVolume). Name is claimd's volume ID.
type ClientCSIControllerCreateRequest struct {
	CSIControllerQuery
	Name         string
	CapacityMin  int64
	CapacityMax  int64
	Capabilities []VolumeCapabilityRequest
	MountOptions *MountOptions
	Parameters   map[string]string
	Secrets      Secrets
	Topology     *VolumeTopologyRequest
	SnapshotID   string
	CloneID      string
	NodeRouting
}

// ClientCSIControllerCreateResponse is the plugin's volume.
type ClientCSIControllerCreateResponse struct {
	ExternalID         string
	Capacity           int64
	Context            map[string]string
	AccessibleTopology []map[string]string
	ControllerNodeID   string
}

// ClientCSIControllerDeleteRequest asks a controller plugin to delete a
// volume (DeleteVolume).
type ClientCSIControllerDeleteRequest struct {
	CSIControllerQuery
	VolumeID   string // claimd's volume ID, for logs
	ExternalID string
	Secrets    Secrets
	NodeRouting
}

// ClientCSIControllerDeleteResponse is empty: success is the answer.
type ClientCSIControllerDeleteResponse struct {
	ControllerNodeID string
}
