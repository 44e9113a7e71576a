package structs

import (
	"encoding/json"
	"strings"
	"testing"
)

func validVolume() *Volume {
	return &Volume{
		ID: "pgdata", ExternalID: "pgdata", PluginID: "hostdir",
		AccessMode: AccessModeSingleNodeWriter, AttachmentMode: AttachmentModeFilesystem,
		MountOptions: &MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
		Parameters:   map[string]string{"tier": "fast"}, Secrets: Secrets{"token": "never-printed"},
		WriteClaims: map[string]*Claim{"a1": {AllocID: "a1", Mode: ClaimModeWrite, State: ClaimStateTaken,
			PublishContext: map[string]string{"dev": "/dev/x"}}},
		PastClaims: map[string]*Claim{"a0": {AllocID: "a0", Mode: ClaimModeWrite, State: ClaimStateNodeDetached}},
	}
}

func TestVolume_CopyIsDeepIncludingClaims(t *testing.T) {
	v := validVolume()
	c := v.Copy()
	c.WriteClaims["a1"].PublishContext["dev"] = "changed"
	c.WriteClaims["a2"] = &Claim{}
	c.PastClaims["a0"].State = ClaimStateFreed
	c.MountOptions.MountFlags[0] = "changed"
	c.Secrets["token"] = "changed"
	if v.WriteClaims["a1"].PublishContext["dev"] != "/dev/x" || len(v.WriteClaims) != 1 ||
		v.PastClaims["a0"].State != ClaimStateNodeDetached || v.MountOptions.MountFlags[0] != "noatime" ||
		v.Secrets["token"] != "never-printed" {
		t.Fatalf("exp: original unchanged got: %+v", v)
	}
}

func TestVolume_ValidateNamesField(t *testing.T) {
	for field, mut := range map[string]func(v *Volume){
		"id":              func(v *Volume) { v.ID = "" },
		"external_id":     func(v *Volume) { v.ExternalID = "" },
		"plugin_id":       func(v *Volume) { v.PluginID = "bad id" },
		"access_mode":     func(v *Volume) { v.AccessMode = "rw" },
		"attachment_mode": func(v *Volume) { v.AttachmentMode = "" },
		"mount_options":   func(v *Volume) { v.AttachmentMode = AttachmentModeBlockDevice },
		"parameters.k":    func(v *Volume) { v.Parameters = map[string]string{"k": strings.Repeat("x", 5000)} },
	} {
		v := validVolume()
		mut(v)
		if err := v.Validate(); err == nil || !strings.HasPrefix(err.Error(), "invalid: "+field+":") {
			t.Fatalf("%s: exp: invalid naming it got: %v", field, err)
		}
	}
}

func TestVolume_ClaimHelpers(t *testing.T) {
	v := validVolume()
	if !v.HasClaims() || v.LiveClaim("a1") == nil || v.LiveClaim("a0") != nil || v.Claim("a0") == nil {
		t.Fatalf("exp: a1 live, a0 past got: %+v", v.AllClaims())
	}
	if all := v.AllClaims(); len(all) != 2 || all[0].AllocID != "a1" || all[1].AllocID != "a0" {
		t.Fatalf("exp: live then past got: %v", all)
	}
}

func TestVolume_SecretsNeverShown(t *testing.T) {
	v := validVolume()
	out, _ := json.Marshal(v)
	s := v.Sanitize()
	if strings.Contains(string(out), "never-printed") || s.Secrets["token"] == "never-printed" ||
		strings.Contains(v.Secrets.String(), "never-printed") {
		t.Fatalf("exp: secret redacted got: %s", out)
	}
	if v.Secrets["token"] != "never-printed" {
		t.Fatalf("exp: Sanitize leaves the original alone got: %v", v.Secrets)
	}
}
