package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

func createSpec(id string) *structs.VolumeCreateSpec {
	return &structs.VolumeCreateSpec{
		ID: id, Name: "created " + id, PluginID: "hostdir", CapacityMin: 1 << 20, CapacityMax: 8 << 20,
		Capabilities: []structs.VolumeCapabilityRequest{
			{AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem},
			{AccessMode: structs.AccessModeSingleNodeReader, AttachmentMode: structs.AttachmentModeFilesystem},
		},
		Parameters: map[string]string{"tier": "fast"},
		Secrets:    structs.Secrets{"token": "s3cret"},
	}
}

// Items 1 and 2 of issue 18 on a secured three-server cluster with the
// built-in plugin as controller and node on different agents: create
// registers the plugin's volume; a repeat makes no second one; delete is
// refused while claims remain, a plugin error leaves the volume registered,
// and after the release delete removes the storage and the registration.
func TestVolumeCreate_CreateClaimReleaseDelete(t *testing.T) {
	e := newCreateEnv(t)
	ctx := func() context.Context { return harness.Ctx(t, 60*time.Second) }

	// A bad spec is refused, naming the field, with nothing changed.
	bad := createSpec("vbad")
	bad.Capabilities[1].AccessMode = "sometimes"
	if _, err := e.api.CreateVolume(ctx(), bad); !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "capabilities[1].access_mode") {
		t.Fatalf("bad capability exp: invalid naming capabilities[1].access_mode got: %v", err)
	}
	bad = createSpec("vbad")
	bad.CapacityMin, bad.CapacityMax = 10, 5
	if _, err := e.api.CreateVolume(ctx(), bad); !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "capacity_max") {
		t.Fatalf("bad capacity exp: invalid naming capacity_max got: %v", err)
	}
	bad = createSpec("vbad")
	bad.PluginID = "nosuch"
	if _, err := e.api.CreateVolume(ctx(), bad); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("unknown plugin exp: not_found got: %v", err)
	}
	if n := countMethod(e.controller.Audit(), "CreateVolume"); n != 0 {
		t.Fatalf("CreateVolume calls after refused specs exp: 0 got: %d", n)
	}
	if _, _, err := e.api.Volume(ctx(), "vbad", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("refused volume exp: not_found got: %v", err)
	}
	if vols, _, err := e.api.Volumes(ctx(), "", structs.QueryOptions{}); err != nil || len(vols) != 0 {
		t.Fatalf("volumes after refused creates exp: none got: %d (%v)", len(vols), err)
	}

	// Create through a follower: forwarded to the leader, which calls the
	// controller agent and registers the answer in one entry.
	res, err := e.c.Servers[1].Client().CreateVolume(ctx(), createSpec("vc1"))
	vol, idx := res.Volume, res.Index
	if err != nil {
		t.Fatalf("create exp: no error got: %v", err)
	}
	if vol.ExternalID != "vc1" || vol.Capacity != 1<<20 || vol.AccessMode != structs.AccessModeSingleNodeWriter || idx == 0 {
		t.Fatalf("created volume exp: external ID vc1, capacity %d, single-node-writer, index > 0 got: %+v index %d", 1<<20, vol, idx)
	}
	got, _, err := e.api.Volume(ctx(), "vc1", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ExternalID != "vc1" || got.Capacity != 1<<20 || got.Parameters["tier"] != "fast" || got.Secrets["token"] != "<redacted>" {
		t.Fatalf("registered volume exp: external ID vc1, capacity %d, parameters, redacted secret got: %+v", 1<<20, got)
	}
	volDir := filepath.Join(e.root, "volumes", "vc1")
	if _, err := os.Stat(volDir); err != nil {
		t.Fatalf("plugin volume directory exp: exists got: %v", err)
	}

	// Same ID again (a retry after a lost answer): the same plugin volume,
	// no new registration.
	res, err = e.api.CreateVolume(ctx(), createSpec("vc1"))
	again := res.Volume
	if err != nil {
		t.Fatalf("repeated create exp: no error got: %v", err)
	}
	if again.ExternalID != "vc1" || again.ModifyIndex != got.ModifyIndex {
		t.Fatalf("repeated create exp: same volume at index %d got: %+v", got.ModifyIndex, again)
	}
	if n := countMethod(e.controller.Audit(), "CreateVolume"); n != 1 {
		t.Fatalf("CreateVolume calls exp: 1 (a registered ID is answered from the state) got: %d", n)
	}
	// A repeat that asks for something else is a conflict naming the
	// field, and still no plugin call (a larger capacity_min grows the
	// volume: TestVolumeLifecycle_RegisterAndCreateGrow).
	other := createSpec("vc1")
	other.Capabilities[0].AccessMode = structs.AccessModeMultiNodeReader
	if _, err := e.api.CreateVolume(ctx(), other); !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "capabilities[0]") {
		t.Fatalf("repeat with another access mode exp: conflict naming capabilities[0] got: %v", err)
	}
	// A volume registered by hand under the same ID: refused, no plugin
	// volume made for it.
	e.register(t, "vreg", structs.AccessModeSingleNodeWriter)
	if _, err := e.api.CreateVolume(ctx(), createSpec("vreg")); !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("create over a registered volume exp: conflict got: %v", err)
	}
	if n := countMethod(e.controller.Audit(), "CreateVolume"); n != 1 {
		t.Fatalf("CreateVolume calls exp: 1 got: %d", n)
	}
	entries, err := os.ReadDir(filepath.Join(e.root, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("plugin volumes exp: 1 got: %d", len(entries))
	}

	// Claimed: delete refused, volume and storage stay.
	e.run(t, "a1", "w1", "vc1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	if _, err := e.api.DeleteVolume(ctx(), "vc1"); !errors.Is(err, structs.ErrConflict) ||
		!strings.Contains(err.Error(), "held by running allocations: a1") {
		t.Fatalf("delete while claimed exp: conflict naming the running a1 got: %v", err)
	}
	if n := countMethod(e.controller.Audit(), "DeleteVolume"); n != 0 {
		t.Fatalf("DeleteVolume calls while claimed exp: 0 got: %d", n)
	}

	// Right after the stop, the refusal says the release is under way
	// (the controller detach is held so that it still is).
	e.controller.SetControl(hostdir.Control{Fail: map[string]int{"ControllerUnpublishVolume": 1000}})
	if _, err := e.api.StopAllocs(ctx(), "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.DeleteVolume(ctx(), "vc1"); !errors.Is(err, structs.ErrConflict) ||
		!strings.Contains(err.Error(), "being released: a1") || strings.Contains(err.Error(), "running allocations") {
		t.Fatalf("delete right after alloc stop exp: the release in progress named got: %v", err)
	}
	e.controller.SetControl(hostdir.Control{Seq: 1})
	e.waitFreed(t, "vc1", 60*time.Second)

	// A plugin error leaves the volume registered and says why.
	e.controller.SetControl(hostdir.Control{Fail: map[string]int{"DeleteVolume": 1},
		FailMessage: map[string]string{"DeleteVolume": "storage array offline"}})
	if _, err := e.api.DeleteVolume(ctx(), "vc1"); err == nil || !strings.Contains(err.Error(), "storage array offline") ||
		!strings.Contains(err.Error(), "stays registered") {
		t.Fatalf("delete with plugin failure exp: error with the plugin's reason got: %v", err)
	}
	if _, _, err := e.api.Volume(ctx(), "vc1", structs.QueryOptions{}); err != nil {
		t.Fatalf("volume after failed delete exp: registered got: %v", err)
	}
	if _, err := os.Stat(volDir); err != nil {
		t.Fatalf("plugin volume directory after failed delete exp: exists got: %v", err)
	}

	if _, err := e.api.DeleteVolume(ctx(), "vc1"); err != nil {
		t.Fatalf("delete after release exp: no error got: %v", err)
	}
	if _, _, err := e.api.Volume(ctx(), "vc1", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("deleted volume exp: not_found got: %v", err)
	}
	if _, err := os.Stat(volDir); !os.IsNotExist(err) {
		t.Fatalf("plugin volume directory exp: gone got: %v", err)
	}
	if n := countCalls(e.controller.Audit(), "DeleteVolume", "vc1", "ok"); n != 1 {
		t.Fatalf("successful DeleteVolume calls exp: 1 got: %d", n)
	}
	if _, err := e.api.DeleteVolume(ctx(), "vc1"); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("delete of a deleted volume exp: not_found got: %v", err)
	}
}

// newCreateEnv is newReleaseEnv with one worker and a controller that
// makes volumes only through CreateVolume: with creation on first use, the
// plugin's own lookup would make an empty directory and CreateVolume would
// then find it (capacity 0).
func newCreateEnv(t *testing.T) *releaseEnv {
	t.Helper()
	return newCreateEnvOpts(t, harness.Options{})
}

// newCreateEnvOpts is newCreateEnv on a cluster made with opts.
func newCreateEnvOpts(t *testing.T, opts harness.Options) *releaseEnv {
	t.Helper()
	e := newReleaseEnvOpts(t, opts, nil, "w1")
	e.controller.Stop()
	e.controller.NoAutoCreate = true
	e.controller.Start()
	return e
}

// The real binary: `claimd volume create FILE` and `claimd volume delete
// ID` through a follower with the CLI certificate and a management token;
// an unknown field in the file is refused before any call, naming it.
func TestVolumeCreate_CLI(t *testing.T) {
	e := newCreateEnv(t)
	pki := e.c.PKI()
	flags := []string{"-address", e.c.Followers()[0].Addr, "-ca-cert", pki.CAFile,
		"-client-cert", pki.CertFile[tlsutil.RoleCLI], "-client-key", pki.KeyFile[tlsutil.RoleCLI],
		"-token", e.c.ManagementToken(), "-timeout", "60s"}
	cli := func(args ...string) harness.CLIResult {
		return harness.RunCLI(t, append(append([]string{"volume"}, args[:1]...), append(flags, args[1:]...)...)...)
	}
	dir := t.TempDir()
	spec := filepath.Join(dir, "scratch.json")
	if err := os.WriteFile(spec, []byte(`{"id": "scratch", "plugin_id": "hostdir", "capacity_min": 2097152,
  "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}],
  "parameters": {"tier": "fast"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"id": "bad", "plugin_id": "hostdir", "size": 5,
  "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cli("create", bad); r.Code == 0 || !strings.Contains(r.Stderr, `unknown field "size"`) {
		t.Fatalf("create with an unknown field exp: failure naming \"size\" got: %d %s", r.Code, r.Stderr)
	}
	r := cli("create", spec)
	if r.Code != 0 || !strings.Contains(r.Stdout, `Volume "scratch" created: external ID "scratch", capacity 2097152 bytes`) {
		t.Fatalf("claimd volume create exp: exit 0 with external ID and capacity got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := cli("create", spec); r.Code != 0 {
		t.Fatalf("repeated claimd volume create exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	if n := countMethod(e.controller.Audit(), "CreateVolume"); n != 1 {
		t.Fatalf("CreateVolume calls exp: 1 (the repeat is answered from the state) got: %d", n)
	}
	if r := cli("delete", "scratch"); r.Code != 0 || !strings.Contains(r.Stdout, `Volume "scratch" deleted`) {
		t.Fatalf("claimd volume delete exp: exit 0 got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.root, "volumes", "scratch")); !os.IsNotExist(err) {
		t.Fatalf("plugin volume directory exp: gone got: %v", err)
	}
	if r := cli("delete", "scratch"); r.Code == 0 || !strings.Contains(r.Stderr, "not_found") {
		t.Fatalf("second delete exp: not_found got: %d %s", r.Code, r.Stderr)
	}
}

func countMethod(entries []hostdir.AuditEntry, method string) int {
	n := 0
	for _, en := range entries {
		if en.Method == method {
			n++
		}
	}
	return n
}
