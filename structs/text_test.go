package structs

import (
	"errors"
	"strings"
	"testing"
)

// External IDs that real CSI drivers use are accepted; IDs that would
// steer a path-building plugin, fool a terminal or exceed CSI's bounds are
// refused with an invalid error naming the field.
func TestValidateExternalID_RealDriverIDsPassAndDangerousOnesAreRefused(t *testing.T) {
	for _, id := range []string{
		"vol-0a1b2c3d4e5f67890", // AWS EBS
		"projects/my-project/zones/europe-west1-b/disks/pvc-5c2b9b1e-0b4a-4a8e-9a55-2f1f4c3a1d10",                                               // GCE PD
		"/subscriptions/9245f5f4-c6a9-4e3a-a8ed-443681bcdf1a/resourceGroups/MC_k8s_k8s_centralindia/providers/Microsoft.Compute/disks/pvc-disk", // Azure disk
		"0001-0009-rook-ceph-0000000000000001-8f1b2c3d-4e5f-6789-abcd-ef0123456789",                                                             // Ceph RBD
		"nfs-server.default.svc.cluster.local#/exports#pvc-1##",                                                                                 // NFS CSI
		"pgdata", "a..b", "v1.2..3", "dir/..hidden", "ünïcödé-卷",
		strings.Repeat("x", MaxExternalIDLen),
	} {
		if err := ValidateExternalID("external_id", id); err != nil {
			t.Errorf("external ID %q exp: accepted got: %v", id, err)
		}
	}
	for _, c := range []struct{ id, problem string }{
		{"", "must not be empty"},
		{"../../etc/shadow", `".." path element`},
		{"vols/../../etc", `".." path element`},
		{"..", `".." path element`},
		{`..\..\windows`, `".." path element`},
		{"vol\x1b[2J", `control character \x1b at byte 3`},
		{"vol\nfake line", `control character \n`},
		{"vol\x00", `control character \x00`},
		{"vol\u009b31m", `control character \u009b`},
		{"vol\u202etxt.exe", `control character \u202e`},
		{"vol\xff", "byte 0xff is not UTF-8"},
		{strings.Repeat("x", 400), "is 400 bytes, at most 256 allowed"},
	} {
		err := ValidateExternalID("external_id", c.id)
		if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "invalid: external_id: ") || !strings.Contains(err.Error(), c.problem) {
			t.Errorf("external ID %q exp: invalid naming external_id and %q got: %v", c.id, c.problem, err)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\x1b\n\x00\u009b\u202e") {
			t.Errorf("external ID %q: the error itself exp: printable got: %q", c.id, err)
		}
	}
}

// EscapeText renders what a terminal would act on as Go escapes and
// leaves everything else, backslashes and non-ASCII letters included,
// unchanged; AppendEscaped with keepLayout keeps newlines and tabs.
func TestEscapeText_ControlsVisibleTextUnchanged(t *testing.T) {
	for in, want := range map[string]string{
		"plain node-1":                      "plain node-1",
		`C:\path ünï 卷 😀`:                   `C:\path ünï 卷 😀`,
		"\x1b]0;pwned\x07":                  `\x1b]0;pwned\x07`,
		"\x1b[2J\x1b[31mnode-1\x1b[0m":      `\x1b[2J\x1b[31mnode-1\x1b[0m`,
		"a\r\nb\tc\x7f":                     `a\r\nb\tc\x7f`,
		"csi\u009b2J":                       `csi\u009b2J`,
		"bidi\u202eevil\u2066x\u2069\u200f": `bidi\u202eevil\u2066x\u2069\u200f`,
		"bad\xc3":                           `bad\xc3`,
		"sep\u2028x":                        `sep\u2028x`,
	} {
		if got := EscapeText(in); got != want {
			t.Errorf("EscapeText(%q) exp: %s got: %s", in, want, got)
		}
	}
	if got := string(AppendEscaped(nil, []byte("a\tb\n\x1b[2J\r"), true)); got != "a\tb\n\\x1b[2J\\r" {
		t.Errorf("AppendEscaped keepLayout exp: tab and newline kept, the rest escaped got: %q", got)
	}
}

// SanitizeText escapes and then bounds, cutting on a character boundary
// and marking the cut.
func TestSanitizeText_EscapesAndBounds(t *testing.T) {
	if got := SanitizeText("ok \x1b[2J", 100); got != `ok \x1b[2J` {
		t.Errorf("short text exp: escaped got: %q", got)
	}
	long := strings.Repeat("\x1b", 1000) // 4,000 bytes once escaped
	got := SanitizeText(long, MaxFreeTextLen)
	if len(got) > MaxFreeTextLen || !strings.HasSuffix(got, truncatedMark) || strings.Contains(got, "\x1b") {
		t.Errorf("long text exp: at most %d bytes, escaped, ending in %q got: %d bytes %q...", MaxFreeTextLen, truncatedMark, len(got), got[:20])
	}
	got = SanitizeText(strings.Repeat("卷", 10), 10) // 3-byte characters
	if got != "卷卷"+truncatedMark {
		t.Errorf("cut exp: on a character boundary got: %q", got)
	}
}

// A node's name and identifiers must be printable (refused, naming the
// field); its free text is sanitised on a copy, never in the agent's own
// value.
func TestNodeRegisterCleanText_RefusesIdentifiersSanitisesFreeText(t *testing.T) {
	node := func() *Node {
		return &Node{ID: "n1", Name: "node-1", SecretID: "s",
			CSINodePlugins: map[string]*CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: false,
				HealthDescription: "\x1b]0;pwned\x07down", Provider: "p\x1b[31m", ExternalNodeID: "n1",
				AccessibleTopology: map[string]string{"zone": "a"}}},
			LastFence: &FenceReport{Volumes: []*FencedVolume{{AllocID: "a1", VolumeID: "v1", Error: "umount: \x1b[2J" + strings.Repeat("e", 2000)}}},
		}
	}
	for _, c := range []struct {
		edit  func(*Node)
		field string
	}{
		{func(n *Node) { n.Name = "\x1b[31mnode-1" }, "name: control character \\x1b"},
		{func(n *Node) { n.Name = strings.Repeat("n", 300) }, "name: is 300 bytes"},
		{func(n *Node) { n.CSINodePlugins["hostdir"].ExternalNodeID = "../../x" }, "csi_node_plugins.hostdir.external_node_id"},
		{func(n *Node) { n.CSINodePlugins["hostdir"].AccessibleTopology = map[string]string{"zone": "a\x1b"} }, "csi_node_plugins.hostdir.accessible_topology.zone"},
		{func(n *Node) { n.CSINodePlugins["hostdir"].AccessibleTopology = map[string]string{"z\none": "a"} }, "csi_node_plugins.hostdir.accessible_topology: "},
	} {
		n := node()
		c.edit(n)
		err := (&NodeRegisterRequest{Node: n}).CleanText()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("exp: invalid naming %q got: %v", c.field, err)
		}
	}

	orig := node()
	req := &NodeRegisterRequest{Node: orig}
	if err := req.CleanText(); err != nil {
		t.Fatalf("node with unprintable free text exp: accepted (sanitised) got: %v", err)
	}
	info := req.Node.CSINodePlugins["hostdir"]
	if info.HealthDescription != `\x1b]0;pwned\x07down` || info.Provider != `p\x1b[31m` {
		t.Errorf("fingerprint exp: escaped description and provider got: %q %q", info.HealthDescription, info.Provider)
	}
	if e := req.Node.LastFence.Volumes[0].Error; len(e) > MaxFreeTextLen || !strings.HasPrefix(e, `umount: \x1b[2J`) {
		t.Errorf("fence error exp: escaped, at most %d bytes got: %d bytes %q", MaxFreeTextLen, len(e), e[:20])
	}
	if orig.CSINodePlugins["hostdir"].HealthDescription != "\x1b]0;pwned\x07down" || !strings.Contains(orig.LastFence.Volumes[0].Error, "\x1b") {
		t.Errorf("the caller's node exp: unchanged (a copy is sanitised) got: changed")
	}
}

// An allocation's client description is sanitised on copies of the
// updates.
func TestAllocClientUpdateCleanText_SanitisesOnACopy(t *testing.T) {
	u := &AllocClientUpdate{ID: "a1", ClientStatus: AllocClientFailed, ClientDescription: "exit 1\x1b[2J"}
	req := &AllocClientUpdateRequest{Allocs: []*AllocClientUpdate{u, nil}}
	req.CleanText()
	if got := req.Allocs[0].ClientDescription; got != `exit 1\x1b[2J` {
		t.Errorf("client description exp: escaped got: %q", got)
	}
	if u.ClientDescription != "exit 1\x1b[2J" || req.Allocs[1] != nil {
		t.Errorf("exp: the caller's update unchanged and nil kept (Validate's to refuse) got: %q %v", u.ClientDescription, req.Allocs[1])
	}
}

// A volume registered now needs a safe external ID and a printable name;
// Validate alone (the state machine's check, which replays old entries)
// still takes them.
func TestVolumeValidateEntry_ExternalIDAndName(t *testing.T) {
	vol := func(ext, name string) *Volume {
		return &Volume{ID: "v1", Name: name, ExternalID: ext, PluginID: "hostdir",
			AccessMode: AccessModeSingleNodeWriter, AttachmentMode: AttachmentModeFilesystem}
	}
	if err := vol("/subscriptions/x/disks/d", "data").ValidateEntry(); err != nil {
		t.Errorf("Azure-style external ID exp: accepted got: %v", err)
	}
	for _, c := range []struct{ ext, name, field string }{
		{"../x", "", "external_id: "},
		{"x\x1b", "", "external_id: "},
		{"x", "\x1b]0;t\x07", "name: "},
	} {
		v := vol(c.ext, c.name)
		if err := v.ValidateEntry(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("volume %q %q exp: invalid naming %s got: %v", c.ext, c.name, c.field, err)
		}
		if err := v.Validate(); err != nil {
			t.Errorf("Validate (replayed entries) of %q exp: unchanged, accepted got: %v", c.ext, err)
		}
	}
}
