package csi

import (
	"path/filepath"

	"github.com/claimd/claimd/structs"
)

// UsageOptions say how an allocation uses a volume. Together with the volume
// and allocation IDs they name the staging and publish paths, so unmounting
// needs the same options that mounting was given.
type UsageOptions struct {
	ReadOnly       bool
	AccessMode     structs.AccessMode
	AttachmentMode structs.AttachmentMode
	MountOptions   *structs.MountOptions
}

func (u UsageOptions) validate() error {
	if !u.AccessMode.Valid() {
		return structs.Invalid("access_mode", "\""+string(u.AccessMode)+"\" is not valid")
	}
	if !u.AttachmentMode.Valid() {
		return structs.Invalid("attachment_mode", "\""+string(u.AttachmentMode)+"\" is not valid")
	}
	return nil
}

func (u UsageOptions) capability() VolumeCapability {
	return VolumeCapability{AccessMode: u.AccessMode, AttachmentMode: u.AttachmentMode, MountOptions: u.MountOptions}
}

// stagingKey is the last element of a staging path. A volume staged for two
// access modes on one node gets two staging paths, since a plugin may stage
// differently (read-only, say) for each.
func (u UsageOptions) stagingKey() string {
	return string(u.AccessMode) + "-" + string(u.AttachmentMode)
}

// publishKey is the last element of a publish path; the read/write mode is
// part of it so one allocation may hold a volume both ways.
func (u UsageOptions) publishKey() string {
	mode := "rw"
	if u.ReadOnly {
		mode = "ro"
	}
	return mode + "-" + u.stagingKey()
}

// StagingPath is <root>/staging/<plugin>/<volume>/<accessmode-attachmode>.
// IDs must have been checked with structs.ValidateID (no '/' or "..").
func StagingPath(root, pluginID, volumeID string, u UsageOptions) string {
	return filepath.Join(root, "staging", pluginID, volumeID, u.stagingKey())
}

// PublishPath is <root>/per-alloc/<alloc>/<volume>/<mode-accessmode-attachmode>.
func PublishPath(root, allocID, volumeID string, u UsageOptions) string {
	return filepath.Join(root, "per-alloc", allocID, volumeID, u.publishKey())
}
