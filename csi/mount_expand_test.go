package csi

import (
	"errors"
	"testing"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// Two allocations share one staged volume: the node view grows once, at
// the shared staging path; a volume not mounted here is zero paths and
// success; a plugin that cannot expand is refused naming plugin_id.
func TestMountManagerExpandOncePerStagingPath(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	m := mustMountManager(t, testutil.TempDir(t), c)
	vol := tp.mustVolume(t, "grow", structs.AccessModeMultiNodeMultiWriter)
	ctx := testCtx(t)
	a, err := m.MountVolume(ctx, vol, "alloc-a", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.MountVolume(ctx, vol, "alloc-b", false, nil); err != nil {
		t.Fatal(err)
	}

	paths, size, err := m.ExpandVolume(ctx, vol.ID, vol.ExternalID, 8<<20, 0)
	if err != nil || paths != 1 || size != 8<<20 {
		t.Fatalf("expand exp: 1 path at %d bytes got: %d paths, %d bytes (%v)", 8<<20, paths, size, err)
	}
	calls := tp.auditMethods(t, "NodeExpandVolume")
	if len(calls) != 1 || calls[0].Result != "ok" || calls[0].Volume != vol.ExternalID {
		t.Fatalf("NodeExpandVolume calls exp: one, ok, for %s got: %+v", vol.ExternalID, calls)
	}
	if calls[0].Target != a.StagingPath {
		t.Fatalf("NodeExpandVolume exp: at the staging path %s got: %s", a.StagingPath, calls[0].Target)
	}

	if paths, _, err := m.ExpandVolume(ctx, "elsewhere", "ext-elsewhere", 8<<20, 0); err != nil || paths != 0 {
		t.Fatalf("volume not mounted here exp: 0 paths, no error got: %d (%v)", paths, err)
	}
	fake := mustMountManager(t, testutil.TempDir(t), newFakeNode())
	if _, _, err := fake.ExpandVolume(ctx, vol.ID, vol.ExternalID, 8<<20, 0); !errors.Is(err, structs.ErrInvalid) {
		t.Fatalf("plugin without NodeExpandVolume exp: invalid got: %v", err)
	}
}
