package volspec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1048576": 1 << 20, "2GiB": 2 << 30, "2G": 2 << 30, "500MB": 500e6, "500M": 500 << 20,
		"3 MiB": 3 << 20, "7B": 7, "1TB": 1e12, "10GiB": 10 << 30,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) exp: %d got: %d (%v)", in, want, got, err)
		}
	}
	for _, bad := range []string{"", "0", "-5", "1.5GiB", "GiB", "12XB", "9999999999TiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) exp: error got: none", bad)
		}
	}
}

const createHCL = `
id        = "pgdata"
name      = "postgres data"
plugin_id = "hostdir"

capacity_min = "10GiB"
capacity_max = 21474836480 # 20 GiB, in bytes

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "file-system"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

parameters {
  tier = "fast"
}

secrets {
  token = "s3cret"
}

topology_request {
  required {
    topology {
      segments { zone = "a" }
    }
    topology {
      segments {
        zone = "b"
        rack = "r1"
      }
    }
  }
  preferred {
    topology {
      segments { zone = "a" }
    }
  }
}
`

const createJSON = `{
  "id": "pgdata", "name": "postgres data", "plugin_id": "hostdir",
  "capacity_min": "10GiB", "capacity_max": 21474836480,
  "capabilities": [
    {"access_mode": "single-node-writer", "attachment_mode": "file-system"},
    {"access_mode": "single-node-reader-only", "attachment_mode": "file-system"}
  ],
  "mount_options": {"fs_type": "ext4", "mount_flags": ["noatime"]},
  "parameters": {"tier": "fast"},
  "secrets": {"token": "s3cret"},
  "topology_request": {"required": [{"zone": "a"}, {"zone": "b", "rack": "r1"}], "preferred": [{"zone": "a"}]}
}`

// The same create spec in HCL and in JSON (sizes with units in both)
// reads to the same request, with every key where the API expects it.
func TestReadCreate_HCLAndJSONGiveTheSameSpec(t *testing.T) {
	fromHCL, err := ReadCreate("pg.hcl", []byte(createHCL))
	if err != nil {
		t.Fatalf("HCL exp: no error got: %v", err)
	}
	fromJSON, err := ReadCreate("pg.json", []byte(createJSON))
	if err != nil {
		t.Fatalf("JSON exp: no error got: %v", err)
	}
	if !reflect.DeepEqual(fromHCL, fromJSON) {
		t.Fatalf("exp: the same spec got:\nHCL  %+v\nJSON %+v", fromHCL, fromJSON)
	}
	want := &structs.VolumeCreateSpec{
		ID: "pgdata", Name: "postgres data", PluginID: "hostdir", CapacityMin: 10 << 30, CapacityMax: 20 << 30,
		Capabilities: []structs.VolumeCapabilityRequest{
			{AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem},
			{AccessMode: structs.AccessModeSingleNodeReader, AttachmentMode: structs.AttachmentModeFilesystem},
		},
		MountOptions: &structs.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
		Parameters:   map[string]string{"tier": "fast"},
		Secrets:      structs.Secrets{"token": "s3cret"},
		Topology: &structs.VolumeTopologyRequest{
			Required:  []map[string]string{{"zone": "a"}, {"zone": "b", "rack": "r1"}},
			Preferred: []map[string]string{{"zone": "a"}},
		},
	}
	if !reflect.DeepEqual(fromHCL, want) {
		t.Fatalf("exp: %+v got: %+v", want, fromHCL)
	}
	if err := fromHCL.Validate(); err != nil {
		t.Fatalf("exp: a valid spec got: %v", err)
	}
}

// A register spec's one capability block is its access and attachment
// mode; without a file ending, the content says which form it is.
func TestReadRegister_HCLWithCapabilityBlockAndSize(t *testing.T) {
	vols, err := ReadRegister("stdin", []byte(`
id          = "v1"
external_id = "ext-1"
plugin_id   = "hostdir"
capacity    = "1G"
node_lost   = "fence"
refuse_claims_when_abnormal = true
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
context { path = "/srv/v1" }
`))
	if err != nil {
		t.Fatalf("exp: no error got: %v", err)
	}
	v := vols[0]
	if len(vols) != 1 || v.ID != "v1" || v.AccessMode != structs.AccessModeSingleNodeWriter ||
		v.AttachmentMode != structs.AttachmentModeFilesystem || v.Capacity != 1<<30 ||
		v.NodeLost != structs.NodeLostFence || !v.RefuseClaimsWhenAbnormal || v.Context["path"] != "/srv/v1" {
		t.Fatalf("exp: v1 single-node-writer, 1 GiB, fence, refusing when abnormal got: %+v", v)
	}
	if err := v.Validate(); err != nil {
		t.Fatalf("exp: a valid volume got: %v", err)
	}
	// JSON arrays keep working, sizes in each element.
	vols, err = ReadRegister("vols.json", []byte(`[{"id": "a", "capacity": "2MiB"}, {"id": "b", "capacity": 5}]`))
	if err != nil || len(vols) != 2 || vols[0].Capacity != 2<<20 || vols[1].Capacity != 5 {
		t.Fatalf("exp: two volumes, 2 MiB and 5 bytes got: %+v, %v", vols, err)
	}
}

// Mistakes are refused naming the file, the line (HCL) and the key.
func TestRead_ErrorsNameFileLineAndKey(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		create     bool
		want       []string
	}{
		{"bad size", "id = \"v\"\ncapacity_min = \"10 gigs\"\n", true, []string{"spec.hcl:2: capacity_min:", `"10 gigs" is not a positive size`}},
		{"fractional bytes", "id = \"v\"\ncapacity_max = 1.5\n", true, []string{"spec.hcl:2: capacity_max:", "not a positive whole number"}},
		{"unknown key", "id = \"v\"\ncapacity_mn = 5\n", true, []string{"spec.hcl:2:", "capacity_mn", `Did you mean "capacity_min"?`}},
		{"bad boolean", "id = \"v\"\nrefuse_claims_when_abnormal = \"yes\"\n", false, []string{"spec.hcl:2: refuse_claims_when_abnormal: want true or false", `"yes"`}},
		{"bare word boolean", "id = \"v\"\nrefuse_claims_when_abnormal = yes\n", false, []string{"spec.hcl:2: refuse_claims_when_abnormal: want true or false, got the bare word yes"}},
		{"number for string", "id = 7\n", false, []string{"spec.hcl:1: id: want a string in quotes, got number"}},
		{"two capabilities on register", "id = \"v\"\ncapability {\naccess_mode = \"a\"\nattachment_mode = \"b\"\n}\ncapability {\naccess_mode = \"a\"\nattachment_mode = \"b\"\n}\n", false, []string{"capability: a registered volume has one access and attachment mode"}},
		{"mount option key", "mount_options {\n  fs = \"ext4\"\n}\n", true, []string{"spec.hcl:2:", "mount_options", `An argument named "fs" is not expected here`}},
		{"parameter not a string", "parameters {\n  replicas = 3\n}\n", true, []string{"spec.hcl:2: parameters.replicas: want a string in quotes, got number"}},
		{"syntax", "id = \"v\n", true, []string{"spec.hcl:1:"}},
		{"segments missing", "topology_request {\n required {\n  topology { }\n }\n}\n", true, []string{"spec.hcl:3: topology_request.required.topology: want one segments block, got 0"}},
	} {
		var err error
		if c.create {
			_, err = ReadCreate("spec.hcl", []byte(c.spec))
		} else {
			_, err = ReadRegister("spec.hcl", []byte(c.spec))
		}
		if err == nil {
			t.Errorf("%s: exp: error got: none", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: exp: error containing %q got: %v", c.name, w, err)
			}
		}
	}
	// JSON: file and key (and the element of an array).
	if _, err := ReadCreate("spec.json", []byte(`{"id": "v", "capacity_min": "lots"}`)); err == nil ||
		!strings.Contains(err.Error(), `spec.json: capacity_min: "lots" is not a positive size`) {
		t.Errorf("JSON size exp: file and key got: %v", err)
	}
	if _, err := ReadRegister("vols.json", []byte(`[{"id": "a"}, {"id": "b", "capacity": "x"}]`)); err == nil ||
		!strings.Contains(err.Error(), "vols.json: [1]: capacity:") {
		t.Errorf("JSON array size exp: the element named got: %v", err)
	}
	if _, err := ReadRegister("v.json", []byte(`{"id": "a", "capacity_min": 5}`)); err == nil ||
		!strings.Contains(err.Error(), `unknown field "capacity_min"`) {
		t.Errorf("JSON unknown key exp: named got: %v", err)
	}
}

// Every example `claimd volume init` writes reads back and is valid, and
// a format's two examples describe the same volume.
func TestExample_ReadsBackValid(t *testing.T) {
	for _, typ := range []string{"register", "create"} {
		var got []any
		for _, asJSON := range []bool{false, true} {
			text, err := Example(typ, asJSON)
			if err != nil {
				t.Fatal(err)
			}
			name := map[bool]string{false: "volume.hcl", true: "volume.json"}[asJSON]
			if typ == "register" {
				vols, err := ReadRegister(name, []byte(text))
				if err != nil || len(vols) != 1 {
					t.Fatalf("%s %s: exp: one volume got: %v", typ, name, err)
				}
				if err := vols[0].Validate(); err != nil {
					t.Fatalf("%s %s: exp: valid got: %v", typ, name, err)
				}
				got = append(got, vols[0])
			} else {
				spec, err := ReadCreate(name, []byte(text))
				if err != nil {
					t.Fatalf("%s %s: exp: a spec got: %v", typ, name, err)
				}
				if err := spec.Validate(); err != nil {
					t.Fatalf("%s %s: exp: valid got: %v", typ, name, err)
				}
				got = append(got, spec)
			}
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("%s: exp: the HCL and JSON examples alike got:\n%+v\n%+v", typ, got[0], got[1])
		}
	}
	if _, err := Example("delete", false); err == nil || !strings.Contains(err.Error(), "type") {
		t.Fatalf("unknown type exp: an error naming type got: %v", err)
	}
}
