package hostdir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/claimd/claimd/internal/testutil"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func stage(t *testing.T, c clients, vol, staging string) error {
	t.Helper()
	_, err := c.node.NodeStageVolume(ctx(t), &csipb.NodeStageVolumeRequest{
		VolumeId: vol, StagingTargetPath: staging, VolumeCapability: mountCap(snw),
	})
	return err
}

func nodePublish(t *testing.T, c clients, vol, staging, target string, ro bool) error {
	t.Helper()
	_, err := c.node.NodePublishVolume(ctx(t), &csipb.NodePublishVolumeRequest{
		VolumeId: vol, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: mountCap(snw), Readonly: ro,
	})
	return err
}

func unpublish(t *testing.T, c clients, vol, target string) error {
	t.Helper()
	_, err := c.node.NodeUnpublishVolume(ctx(t), &csipb.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target})
	return err
}

func unstage(t *testing.T, c clients, vol, staging string) error {
	t.Helper()
	_, err := c.node.NodeUnstageVolume(ctx(t), &csipb.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: staging})
	return err
}

// testNodeRoundTrip stages and publishes a volume, writes through the
// publish path, and checks that unpublish and unstage undo it all and may
// be repeated.
func testNodeRoundTrip(t *testing.T, method MountMethod, wantMounted bool) {
	dir := testutil.TempDir(t)
	p := mustStartPlugin(t, Config{MountMethod: method})
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "data")
	staging := filepath.Join(dir, "staging")
	target := filepath.Join(dir, "pub", "target")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}

	for i := 0; i < 2; i++ { // the second round checks idempotency
		expectCode(t, stage(t, c, vol, staging), codes.OK)
		expectCode(t, nodePublish(t, c, vol, staging, target, false), codes.OK)
	}
	if mounted, _ := isMountPoint(target); mounted != wantMounted {
		t.Fatalf("exp: target mounted=%t got: %t", wantMounted, mounted)
	}
	if err := os.WriteFile(filepath.Join(target, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("exp: target writable got: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.VolumePath(vol), "hello")); err != nil {
		t.Fatalf("exp: write visible in the volume got: %v", err)
	}

	for i := 0; i < 2; i++ {
		expectCode(t, unpublish(t, c, vol, target), codes.OK)
		expectCode(t, unstage(t, c, vol, staging), codes.OK)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("exp: target removed got: %v", err)
	}
	if entries, err := os.ReadDir(staging); err != nil || len(entries) != 0 {
		t.Fatalf("exp: staging dir left empty got: %v %v", entries, err)
	}
	if _, err := os.Stat(filepath.Join(p.VolumePath(vol), "hello")); err != nil {
		t.Fatalf("exp: data kept after unpublish got: %v", err)
	}
}

func TestNodeRoundTripBindMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	testNodeRoundTrip(t, MountBind, true)
}

func TestNodeRoundTripSymlink(t *testing.T) {
	testNodeRoundTrip(t, MountSymlink, false)
}

func TestNodePublishReadOnlyBindMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	dir := testutil.TempDir(t)
	p := mustStartPlugin(t, Config{MountMethod: MountBind})
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "ro")
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	expectCode(t, stage(t, c, vol, staging), codes.OK)
	expectCode(t, nodePublish(t, c, vol, staging, target, true), codes.OK)
	t.Cleanup(func() { _ = unpublish(t, c, vol, target); _ = unstage(t, c, vol, staging) })
	err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("exp: EROFS got: %v", err)
	}
}

func TestNodePublishNeedsStagedVolume(t *testing.T) {
	dir := testutil.TempDir(t)
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "unstaged")
	err := nodePublish(t, c, vol, filepath.Join(dir, "staging"), filepath.Join(dir, "target"), false)
	expectCode(t, err, codes.FailedPrecondition)
	expectCode(t, stage(t, c, "missing", filepath.Join(dir, "staging")), codes.NotFound)
}

func TestNodeRefusesTargetInUse(t *testing.T) {
	dir := testutil.TempDir(t)
	p := mustStartPlugin(t, Config{MountMethod: MountSymlink})
	c := mustDial(t, p)
	a, b := mustCreateVolume(t, c, "a"), mustCreateVolume(t, c, "b")
	sa, sb, target := filepath.Join(dir, "sa"), filepath.Join(dir, "sb"), filepath.Join(dir, "target")
	expectCode(t, stage(t, c, a, sa), codes.OK)
	expectCode(t, stage(t, c, b, sb), codes.OK)
	expectCode(t, nodePublish(t, c, a, sa, target, false), codes.OK)
	expectCode(t, nodePublish(t, c, b, sb, target, false), codes.AlreadyExists)
	expectCode(t, stage(t, c, b, sa), codes.AlreadyExists)
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`: "/a b", `/plain`: "/plain", `/tab\011x`: "/tab\tx", `/bad\09`: `/bad\09`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("exp: %q got: %q", want, got)
		}
	}
}
