package structs

import "fmt"

// Volume modification (CSI MODIFY_VOLUME, issue 27): a volume's mutable
// parameters changed through its controller, recorded like an expansion
// once the plugin did it.

// maxMutableParameters bounds one modification.
const maxMutableParameters = 64

// VolumeModifyRequest asks for a volume's mutable parameters to change.
type VolumeModifyRequest struct {
	VolumeID          string
	MutableParameters map[string]string
	WriteRequest
}

// Validate names the field at fault.
func (r *VolumeModifyRequest) Validate() error {
	if err := ValidateID("volume_id", r.VolumeID); err != nil {
		return err
	}
	if len(r.MutableParameters) == 0 {
		return Invalid("mutable_parameters", "at least one parameter is required")
	}
	if len(r.MutableParameters) > maxMutableParameters {
		return Invalid("mutable_parameters", fmt.Sprintf("has %d entries, at most %d allowed", len(r.MutableParameters), maxMutableParameters))
	}
	for _, k := range SortedKeys(r.MutableParameters) {
		if k == "" {
			return Invalid("mutable_parameters", "keys must not be empty")
		}
		if len(k)+len(r.MutableParameters[k]) > maxVolumeValueLen {
			return Invalid("mutable_parameters."+k, fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
		}
	}
	return nil
}

// VolumeModifyResponse is the volume as recorded after the change.
type VolumeModifyResponse struct {
	Volume *Volume
	Index  uint64
}

// VolumeModifiedRequest records what the plugin changed: the parameters
// merged into the volume's MutableParameters, for the same storage object.
type VolumeModifiedRequest struct {
	VolumeID          string
	ExternalID        string
	MutableParameters map[string]string
	WriteRequest
}

// ClientCSIControllerModifyRequest asks a controller plugin to modify a
// volume (ControllerModifyVolume).
type ClientCSIControllerModifyRequest struct {
	CSIControllerQuery
	VolumeID          string // claimd's, for logs
	ExternalID        string
	MutableParameters map[string]string
	Secrets           Secrets
	NodeRouting
}

// ClientCSIControllerModifyResponse says which controller did it.
type ClientCSIControllerModifyResponse struct {
	ControllerNodeID string
}
