package volspec

import (
	"strings"
	"testing"
)

// A register spec whose external ID the servers would refuse (it is given
// to the plugin) is refused when read, naming the file, the volume in a
// list, and the key; an Azure-style resource path is a valid ID.
func TestReadRegister_RefusesUnsafeExternalIDs(t *testing.T) {
	spec := func(ext string) string {
		return `id = "v1"
plugin_id = "hostdir"
external_id = "` + ext + `"
access_mode = "single-node-writer"
attachment_mode = "file-system"
`
	}
	if _, err := ReadRegister("v.hcl", []byte(spec("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/d"))); err != nil {
		t.Fatalf("Azure-style external ID exp: read got: %v", err)
	}
	for ext, problem := range map[string]string{
		"../../etc":              `".." path element`,
		`vol\u001b[2J`:           `control character \x1b`,
		strings.Repeat("x", 400): "is 400 bytes, at most 256 allowed",
	} {
		_, err := ReadRegister("v.hcl", []byte(spec(ext)))
		if err == nil || !strings.HasPrefix(err.Error(), "v.hcl: invalid: external_id: ") || !strings.Contains(err.Error(), problem) {
			t.Errorf("external_id %q exp: refused naming v.hcl, external_id and %q got: %v", ext, problem, err)
		}
	}
	list := `[{"id": "a", "plugin_id": "p", "external_id": "ok", "access_mode": "single-node-writer", "attachment_mode": "file-system"},
	          {"id": "b", "plugin_id": "p", "external_id": "x/../y", "access_mode": "single-node-writer", "attachment_mode": "file-system"}]`
	if _, err := ReadRegister("vols.json", []byte(list)); err == nil || !strings.HasPrefix(err.Error(), "vols.json: invalid: [1].external_id: ") {
		t.Errorf("list exp: refused naming vols.json and [1].external_id got: %v", err)
	}
}
