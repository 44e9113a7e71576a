package structs

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
)

// AccessMode is the CSI access mode of a volume.
type AccessMode string

const (
	AccessModeSingleNodeReader      AccessMode = "single-node-reader-only"
	AccessModeSingleNodeWriter      AccessMode = "single-node-writer"
	AccessModeMultiNodeReader       AccessMode = "multi-node-reader-only"
	AccessModeMultiNodeSingleWriter AccessMode = "multi-node-single-writer"
	AccessModeMultiNodeMultiWriter  AccessMode = "multi-node-multi-writer"
)

// AccessModes lists every valid access mode, in table order.
var AccessModes = []AccessMode{
	AccessModeSingleNodeReader, AccessModeSingleNodeWriter, AccessModeMultiNodeReader,
	AccessModeMultiNodeSingleWriter, AccessModeMultiNodeMultiWriter,
}

func (m AccessMode) Valid() bool {
	for _, v := range AccessModes {
		if m == v {
			return true
		}
	}
	return false
}

// AttachmentMode is how the volume is presented to the workload.
type AttachmentMode string

const (
	AttachmentModeFilesystem  AttachmentMode = "file-system"
	AttachmentModeBlockDevice AttachmentMode = "block-device"
)

func (m AttachmentMode) Valid() bool {
	return m == AttachmentModeFilesystem || m == AttachmentModeBlockDevice
}

// MountOptions are passed to the node plugin when staging and publishing.
type MountOptions struct {
	FSType     string   `json:"fs_type,omitempty"`
	MountFlags []string `json:"mount_flags,omitempty"`
}

// Secrets are passed to plugins and never shown: not in logs, not in status
// output, not in JSON.
type Secrets map[string]string

// redacted is what operators see instead of a secret value.
const redacted = "<redacted>"

// MarshalJSON redacts every value so a secret cannot leak through -json
// output or a log line that prints a volume.
func (s Secrets) MarshalJSON() ([]byte, error) {
	out := make(map[string]string, len(s))
	for k := range s {
		out[k] = redacted
	}
	return json.Marshal(out)
}

// String redacts too, for %v in log lines.
func (s Secrets) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%d secrets %v (values redacted)", len(keys), keys)
}

// Volume is a registered CSI volume and the claims on it.
type Volume struct {
	ID             string            `json:"id"`
	Name           string            `json:"name,omitempty"`
	ExternalID     string            `json:"external_id"`
	PluginID       string            `json:"plugin_id"`
	AccessMode     AccessMode        `json:"access_mode"`
	AttachmentMode AttachmentMode    `json:"attachment_mode"`
	MountOptions   *MountOptions     `json:"mount_options,omitempty"`
	Parameters     map[string]string `json:"parameters,omitempty"`
	Context        map[string]string `json:"context,omitempty"`
	Secrets        Secrets           `json:"secrets,omitempty"`

	CreateIndex uint64 `json:"create_index,omitempty"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateID checks an object ID: 1-128 characters of letters, digits, '.',
// '_' and '-', starting with a letter or digit.
func ValidateID(field, id string) error {
	if id == "" {
		return Invalid(field, "must not be empty")
	}
	if !idPattern.MatchString(id) {
		return Invalid(field, fmt.Sprintf("%q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", id))
	}
	return nil
}

// Limits on what one volume may carry, so a single request cannot bloat the
// replicated state.
const (
	maxVolumeMapEntries = 64
	maxVolumeValueLen   = 4096
)

// Validate checks a volume spec as an operator submits it. Errors name the
// field in the JSON spelling the operator wrote.
func (v *Volume) Validate() error {
	if v == nil {
		return Invalid("volume", "must be given")
	}
	if err := ValidateID("id", v.ID); err != nil {
		return err
	}
	if v.ExternalID == "" {
		return Invalid("external_id", "must not be empty")
	}
	if err := ValidateID("plugin_id", v.PluginID); err != nil {
		return err
	}
	if !v.AccessMode.Valid() {
		return Invalid("access_mode", fmt.Sprintf("%q is not one of %v", v.AccessMode, AccessModes))
	}
	if !v.AttachmentMode.Valid() {
		return Invalid("attachment_mode", fmt.Sprintf("%q is not %q or %q", v.AttachmentMode,
			AttachmentModeFilesystem, AttachmentModeBlockDevice))
	}
	if v.AttachmentMode == AttachmentModeBlockDevice && v.MountOptions != nil &&
		(v.MountOptions.FSType != "" || len(v.MountOptions.MountFlags) > 0) {
		return Invalid("mount_options", "not allowed with attachment_mode \"block-device\"")
	}
	for field, m := range map[string]map[string]string{
		"parameters": v.Parameters, "context": v.Context, "secrets": v.Secrets,
	} {
		if len(m) > maxVolumeMapEntries {
			return Invalid(field, fmt.Sprintf("has %d entries, at most %d allowed", len(m), maxVolumeMapEntries))
		}
		for k, val := range m {
			if k == "" {
				return Invalid(field, "keys must not be empty")
			}
			if len(k)+len(val) > maxVolumeValueLen {
				return Invalid(field+"."+k, fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
			}
		}
	}
	return nil
}

// Copy returns a deep copy; state-store objects are never mutated in place.
func (v *Volume) Copy() *Volume {
	if v == nil {
		return nil
	}
	c := *v
	if v.MountOptions != nil {
		mo := *v.MountOptions
		mo.MountFlags = append([]string(nil), v.MountOptions.MountFlags...)
		c.MountOptions = &mo
	}
	c.Parameters = copyStringMap(v.Parameters)
	c.Context = copyStringMap(v.Context)
	c.Secrets = Secrets(copyStringMap(v.Secrets))
	return &c
}

// Sanitize returns a copy fit to show an operator: secrets redacted.
func (v *Volume) Sanitize() *Volume {
	c := v.Copy()
	for k := range c.Secrets {
		c.Secrets[k] = redacted
	}
	return c
}

func copyStringMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// VolumeRegisterRequest registers or updates volumes.
type VolumeRegisterRequest struct {
	Volumes []*Volume
	WriteRequest
}

// VolumeDeregisterRequest removes volumes.
type VolumeDeregisterRequest struct {
	VolumeIDs []string
	Force     bool
	WriteRequest
}

// VolumeSpecificRequest reads one volume.
type VolumeSpecificRequest struct {
	ID string
	QueryOptions
}

// VolumeListRequest lists volumes, optionally of one plugin.
type VolumeListRequest struct {
	PluginID string
	QueryOptions
}

// VolumeResponse carries one volume (nil when not found) .
type VolumeResponse struct {
	Volume *Volume
	QueryMeta
}

// VolumeListResponse carries volumes sorted by ID.
type VolumeListResponse struct {
	Volumes []*Volume
	QueryMeta
}
