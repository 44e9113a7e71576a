package structs

import (
	"errors"
	"strings"
	"testing"
)

func validCreateSpec() *VolumeCreateSpec {
	return &VolumeCreateSpec{
		ID: "scratch", PluginID: "hostdir", CapacityMin: 1 << 20, CapacityMax: 1 << 30,
		Capabilities: []VolumeCapabilityRequest{
			{AccessMode: AccessModeMultiNodeReader, AttachmentMode: AttachmentModeFilesystem},
			{AccessMode: AccessModeSingleNodeWriter, AttachmentMode: AttachmentModeFilesystem},
		},
		Parameters: map[string]string{"tier": "fast"}, Secrets: Secrets{"token": "x"},
		Topology: &VolumeTopologyRequest{Required: []map[string]string{{"zone": "a"}}},
	}
}

func TestVolumeCreateSpec_ValidateNamesField(t *testing.T) {
	if err := validCreateSpec().Validate(); err != nil {
		t.Fatalf("valid spec exp: no error got: %v", err)
	}
	for field, mut := range map[string]func(s *VolumeCreateSpec){
		"id":                              func(s *VolumeCreateSpec) { s.ID = "" },
		"plugin_id":                       func(s *VolumeCreateSpec) { s.PluginID = "bad id" },
		"capacity_min":                    func(s *VolumeCreateSpec) { s.CapacityMin = -1 },
		"capacity_max":                    func(s *VolumeCreateSpec) { s.CapacityMax = 1 },
		"capabilities":                    func(s *VolumeCreateSpec) { s.Capabilities = nil },
		"capabilities[1].access_mode":     func(s *VolumeCreateSpec) { s.Capabilities[1].AccessMode = "often" },
		"capabilities[0].attachment_mode": func(s *VolumeCreateSpec) { s.Capabilities[0].AttachmentMode = "tape" },
		"clone_id":                        func(s *VolumeCreateSpec) { s.SnapshotID, s.CloneID = "s1", "v1" },
		"topology_request.required[0]":    func(s *VolumeCreateSpec) { s.Topology.Required[0] = map[string]string{} },
		"topology_request.preferred[0]":   func(s *VolumeCreateSpec) { s.Topology.Preferred = []map[string]string{nil} },
		"parameters":                      func(s *VolumeCreateSpec) { s.Parameters[""] = "x" },
		"mount_options": func(s *VolumeCreateSpec) {
			s.Capabilities[0].AttachmentMode = AttachmentModeBlockDevice
			s.MountOptions = &MountOptions{FSType: "ext4"}
		},
	} {
		s := validCreateSpec()
		mut(s)
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field+":") {
			t.Errorf("%s exp: invalid naming %q got: %v", field, field, err)
		}
	}
}

func TestVolumeCreateSpec_VolumeTakesFirstCapabilityAndPluginAnswer(t *testing.T) {
	s := validCreateSpec()
	v := s.Volume("ext-1", 4096, map[string]string{"k": "v"}, []map[string]string{{"zone": "a"}})
	if v.AccessMode != AccessModeMultiNodeReader || v.AttachmentMode != AttachmentModeFilesystem ||
		v.ExternalID != "ext-1" || v.Capacity != 4096 || v.Context["k"] != "v" || v.TopologyText() != "[zone=a]" {
		t.Fatalf("exp: first capability's modes and the plugin's answer got: %+v", v)
	}
	v.Parameters["tier"] = "changed"
	if s.Parameters["tier"] != "fast" {
		t.Fatalf("exp: the volume is a copy got: spec parameters changed")
	}
	if err := v.Validate(); err != nil {
		t.Fatalf("exp: valid volume got: %v", err)
	}
}
