package csi

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

func mustCallerMountManager(t *testing.T, root string, plugin NodePlugin, usages []Usage) *MountManager {
	t.Helper()
	m, err := NewMountManager(MountManagerConfig{Root: root, PluginID: "hostdir", Plugin: plugin, RequiresStaging: true,
		Logger: testLogger(t), CallerRecordsUsage: true, Usages: usages})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// usageFiles lists the usage files under root.
func usageFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, usageSuffix) {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMountManagerCallerRecordsUsage: with the caller's record as the usage
// record, a mount writes no usage file, and a new manager given the
// caller's uses (an agent restart) counts both users of a staged volume:
// unmounting one does not unstage it under the other.
func TestMountManagerCallerRecordsUsage(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	root := testutil.TempDir(t)
	vol := tp.mustVolume(t, "v", structs.AccessModeMultiNodeMultiWriter)
	ctx := testCtx(t)
	first := mustCallerMountManager(t, root, c, nil)
	var uses []Usage
	for _, alloc := range []string{"a1", "a2"} {
		if _, err := first.MountVolume(ctx, vol, alloc, false, nil); err != nil {
			t.Fatal(err)
		}
		uses = append(uses, Usage{VolumeID: vol.ID, ExternalID: vol.ExternalID, AllocID: alloc, Options: usageOf(vol, false)})
	}
	if files := usageFiles(t, root); len(files) != 0 {
		t.Fatalf("exp: no usage file got: %v", files)
	}

	second := mustCallerMountManager(t, root, c, uses)
	if n := second.Users(vol.ID); n != 2 {
		t.Fatalf("exp: 2 users after restart got: %d", n)
	}
	unmountA1ThenA2(t, ctx, tp, second, vol)
}

// TestMountManagerCallerRecordsUsageReadsOldFiles: usage files an earlier
// agent wrote still count after an upgrade to the caller's record, and go
// with their use.
func TestMountManagerCallerRecordsUsageReadsOldFiles(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	root := testutil.TempDir(t)
	vol := tp.mustVolume(t, "v", structs.AccessModeMultiNodeMultiWriter)
	ctx := testCtx(t)
	old := mustMountManager(t, root, c)
	for _, alloc := range []string{"a1", "a2"} {
		if _, err := old.MountVolume(ctx, vol, alloc, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if files := usageFiles(t, root); len(files) != 2 {
		t.Fatalf("exp: two usage files from the old manager got: %v", files)
	}
	upgraded := mustCallerMountManager(t, root, c, nil)
	if n := upgraded.Users(vol.ID); n != 2 {
		t.Fatalf("exp: 2 users from the old files got: %d", n)
	}
	unmountA1ThenA2(t, ctx, tp, upgraded, vol)
	if files := usageFiles(t, root); len(files) != 0 {
		t.Fatalf("exp: old usage files removed with their use got: %v", files)
	}
}
