package csi

import (
	"fmt"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// VolumeCapability is how claimd wants a volume presented: the volume's
// access and attachment modes and its mount options. ToCSI turns it into the
// csi.VolumeCapability every controller and node call carries.
type VolumeCapability struct {
	AccessMode     structs.AccessMode
	AttachmentMode structs.AttachmentMode
	MountOptions   *structs.MountOptions
}

// CapabilityOf returns the capability a registered volume asks for.
func CapabilityOf(v *structs.Volume) VolumeCapability {
	return VolumeCapability{AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, MountOptions: v.MountOptions}
}

var accessModes = map[structs.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
	structs.AccessModeSingleNodeReader:       csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	structs.AccessModeSingleNodeWriter:       csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	structs.AccessModeMultiNodeReader:        csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	structs.AccessModeMultiNodeSingleWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
	structs.AccessModeMultiNodeMultiWriter:   csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
	structs.AccessModeSingleNodeSingleWriter: csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
	structs.AccessModeSingleNodeMultiWriter:  csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
}

// ToCSI converts the capability. Invalid modes are refused with a coded
// invalid error rather than sent as UNKNOWN, which plugins reject with
// messages that do not name claimd's field.
func (c VolumeCapability) ToCSI() (*csipb.VolumeCapability, error) {
	mode, ok := accessModes[c.AccessMode]
	if !ok {
		return nil, structs.Invalid("access_mode", fmt.Sprintf("%q is not one of %v", c.AccessMode, structs.AccessModes))
	}
	out := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode}}
	switch c.AttachmentMode {
	case structs.AttachmentModeFilesystem:
		mount := &csipb.VolumeCapability_MountVolume{}
		if c.MountOptions != nil {
			mount.FsType = c.MountOptions.FSType
			mount.MountFlags = append([]string(nil), c.MountOptions.MountFlags...)
		}
		out.AccessType = &csipb.VolumeCapability_Mount{Mount: mount}
	case structs.AttachmentModeBlockDevice:
		out.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	default:
		return nil, structs.Invalid("attachment_mode", fmt.Sprintf("%q is not %q or %q", c.AttachmentMode,
			structs.AttachmentModeFilesystem, structs.AttachmentModeBlockDevice))
	}
	return out, nil
}
