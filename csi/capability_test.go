package csi

import (
	"errors"
	"testing"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

func TestVolumeCapabilityToCSI(t *testing.T) {
	modes := map[structs.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
		structs.AccessModeSingleNodeReader:       csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		structs.AccessModeSingleNodeWriter:       csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		structs.AccessModeMultiNodeReader:        csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		structs.AccessModeMultiNodeSingleWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		structs.AccessModeMultiNodeMultiWriter:   csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		structs.AccessModeSingleNodeSingleWriter: csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		structs.AccessModeSingleNodeMultiWriter:  csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
	}
	if len(modes) != len(structs.AccessModes) {
		t.Fatalf("exp: every claimd access mode mapped got: %d of %d", len(modes), len(structs.AccessModes))
	}
	for am, want := range modes {
		vc, err := VolumeCapability{AccessMode: am, AttachmentMode: structs.AttachmentModeFilesystem,
			MountOptions: &structs.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}}}.ToCSI()
		if err != nil {
			t.Fatal(err)
		}
		if vc.GetAccessMode().GetMode() != want {
			t.Errorf("%s exp: %s got: %s", am, want, vc.GetAccessMode().GetMode())
		}
		m := vc.GetMount()
		if m.GetFsType() != "ext4" || len(m.GetMountFlags()) != 1 || m.GetMountFlags()[0] != "noatime" {
			t.Errorf("exp: mount options carried got: %v", m)
		}
	}
	vc, err := VolumeCapability{AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeBlockDevice}.ToCSI()
	if err != nil || vc.GetBlock() == nil {
		t.Fatalf("exp: block access got: %v %v", vc, err)
	}
	for _, bad := range []VolumeCapability{
		{AccessMode: "sometimes", AttachmentMode: structs.AttachmentModeFilesystem},
		{AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: "floppy"},
	} {
		if _, err := bad.ToCSI(); !errors.Is(err, structs.ErrInvalid) {
			t.Errorf("%+v exp: invalid got: %v", bad, err)
		}
	}
}
