package csi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/internal/mountinfo"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

func mustMountManager(t *testing.T, root string, plugin NodePlugin) *MountManager {
	t.Helper()
	m, err := NewMountManager(MountManagerConfig{Root: root, PluginID: "hostdir", Plugin: plugin, RequiresStaging: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func usageOf(v *structs.Volume, ro bool) UsageOptions {
	return UsageOptions{ReadOnly: ro, AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, MountOptions: v.MountOptions}
}

func methods(entries []hostdir.AuditEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Method
	}
	return out
}

func expectMethods(t *testing.T, tp *testPlugin, want ...string) {
	t.Helper()
	got := methods(tp.auditMethods(t, "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("exp: %v got: %v", want, got)
	}
}

func TestMountPaths(t *testing.T) {
	u := UsageOptions{ReadOnly: true, AccessMode: structs.AccessModeMultiNodeReader, AttachmentMode: structs.AttachmentModeFilesystem}
	if got := StagingPath("/d", "hostdir", "vol", u); got != "/d/staging/hostdir/vol/multi-node-reader-only-file-system" {
		t.Errorf("staging got: %s", got)
	}
	if got := PublishPath("/d", "alloc1", "vol", u); got != "/d/per-alloc/alloc1/vol/ro-multi-node-reader-only-file-system" {
		t.Errorf("publish got: %s", got)
	}
}

// TestMountManagerStagesOncePerNode: two allocations share a staged volume;
// the volume is unstaged only after the last of them unmounts, and
// unmounting again is harmless.
func TestMountManagerStagesOncePerNode(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	root := testutil.TempDir(t)
	m := mustMountManager(t, root, c)
	vol := tp.mustVolume(t, "shared", structs.AccessModeMultiNodeMultiWriter)
	ctx := testCtx(t)

	a, err := m.MountVolume(ctx, vol, "alloc-a", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.MountVolume(ctx, vol, "alloc-b", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.StagingPath != b.StagingPath || a.TargetPath == b.TargetPath ||
		a.TargetPath != PublishPath(root, "alloc-a", vol.ID, usageOf(vol, false)) {
		t.Fatalf("exp: one staging path, two targets got: %+v %+v", a, b)
	}
	if err := os.WriteFile(filepath.Join(a.Source, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.Source, "f")); err != nil {
		t.Fatalf("exp: both allocs see one volume got: %v", err)
	}
	expectMethods(t, tp, "NodeStageVolume", "NodePublishVolume", "NodePublishVolume")

	if err := m.UnmountVolume(ctx, vol.ID, vol.ExternalID, "alloc-a", usageOf(vol, false)); err != nil {
		t.Fatal(err)
	}
	if m.Users(vol.ID) != 1 {
		t.Fatalf("exp: 1 user got: %d", m.Users(vol.ID))
	}
	expectMethods(t, tp, "NodeStageVolume", "NodePublishVolume", "NodePublishVolume", "NodeUnpublishVolume")

	for i := 0; i < 2; i++ {
		if err := m.UnmountVolume(ctx, vol.ID, vol.ExternalID, "alloc-b", usageOf(vol, false)); err != nil {
			t.Fatalf("unmount %d exp: ok got: %v", i, err)
		}
	}
	expectMethods(t, tp, "NodeStageVolume", "NodePublishVolume", "NodePublishVolume", "NodeUnpublishVolume",
		"NodeUnpublishVolume", "NodeUnstageVolume", "NodeUnpublishVolume", "NodeUnstageVolume")
	for _, gone := range []string{filepath.Join(root, "per-alloc", "alloc-a"), filepath.Join(root, "per-alloc", "alloc-b")} {
		if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("exp: %s removed got: %v", gone, err)
		}
	}
	// The staging directory stays for the volume's next mount here, empty:
	// the plugin unstaged it.
	staging := StagingPath(root, "hostdir", vol.ID, usageOf(vol, false))
	if ents, err := os.ReadDir(staging); err != nil || len(ents) != 0 {
		t.Errorf("exp: %s kept empty got: %v %v", staging, ents, err)
	}
	if mounts, err := mountinfo.Under(staging); err != nil || len(mounts) != 0 {
		t.Errorf("exp: nothing mounted at %s got: %v %v", staging, mounts, err)
	}
	// And the next mount of the volume stages it there again.
	if _, err := m.MountVolume(ctx, vol, "alloc-c", false, nil); err != nil {
		t.Fatalf("exp: mount again ok got: %v", err)
	}
	if err := m.UnmountVolume(ctx, vol.ID, vol.ExternalID, "alloc-c", usageOf(vol, false)); err != nil {
		t.Fatalf("exp: unmount again ok got: %v", err)
	}
	expectMethods(t, tp, "NodeStageVolume", "NodePublishVolume", "NodePublishVolume", "NodeUnpublishVolume",
		"NodeUnpublishVolume", "NodeUnstageVolume", "NodeUnpublishVolume", "NodeUnstageVolume",
		"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume")
}

// TestMountManagerUsageSurvivesRestart: a new manager on the same root (an
// agent restart) still knows both users and does not unstage early.
func TestMountManagerUsageSurvivesRestart(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	root := testutil.TempDir(t)
	vol := tp.mustVolume(t, "v", structs.AccessModeMultiNodeMultiWriter)
	ctx := testCtx(t)
	first := mustMountManager(t, root, c)
	for _, alloc := range []string{"a1", "a2"} {
		if _, err := first.MountVolume(ctx, vol, alloc, false, nil); err != nil {
			t.Fatal(err)
		}
	}

	second := mustMountManager(t, root, c)
	if n := second.Users(vol.ID); n != 2 {
		t.Fatalf("exp: 2 users after restart got: %d", n)
	}
	unmountA1ThenA2(t, ctx, tp, second, vol)
}

// TestMountManagerFailedStageKeepsUsage: a mount that fails leaves its
// usage in place; a retry completes it and the release cleans up.
func TestMountManagerFailedStageKeepsUsage(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	m := mustMountManager(t, testutil.TempDir(t), c)
	vol := tp.mustVolume(t, "v", structs.AccessModeSingleNodeWriter)
	ctx := testCtx(t)

	tp.control(t, hostdir.Control{Fail: map[string]int{"NodeStageVolume": 1}})
	if _, err := m.MountVolume(ctx, vol, "a1", false, nil); !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("exp: unavailable got: %v", err)
	}
	if m.Users(vol.ID) != 1 {
		t.Fatalf("exp: usage kept got: %d", m.Users(vol.ID))
	}
	if _, err := m.MountVolume(ctx, vol, "a1", false, nil); err != nil {
		t.Fatalf("exp: retry mounts got: %v", err)
	}
	if err := m.UnmountVolume(ctx, vol.ID, vol.ExternalID, "a1", usageOf(vol, false)); err != nil {
		t.Fatal(err)
	}
	if m.Users(vol.ID) != 0 {
		t.Fatalf("exp: no users got: %d", m.Users(vol.ID))
	}
}

// TestMountManagerUnmountTreatsNoMountPointAsDone: seed 6 end to end: the
// plugin says there is no mount point; the release still completes.
func TestMountManagerUnmountTreatsNoMountPointAsDone(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	m := mustMountManager(t, testutil.TempDir(t), c)
	vol := tp.mustVolume(t, "v", structs.AccessModeSingleNodeWriter)
	ctx := testCtx(t)
	if _, err := m.MountVolume(ctx, vol, "a1", false, nil); err != nil {
		t.Fatal(err)
	}
	tp.control(t, hostdir.Control{
		Fail:        map[string]int{"NodeUnpublishVolume": 1, "NodeUnstageVolume": 1},
		FailCode:    map[string]string{"NodeUnpublishVolume": "Internal", "NodeUnstageVolume": "Internal"},
		FailMessage: map[string]string{"NodeUnpublishVolume": "umount: no mount point specified", "NodeUnstageVolume": "not mounted"},
	})
	if err := m.UnmountVolume(ctx, vol.ID, vol.ExternalID, "a1", usageOf(vol, false)); err != nil {
		t.Fatalf("exp: done got: %v", err)
	}
	if m.Users(vol.ID) != 0 {
		t.Fatalf("exp: no users got: %d", m.Users(vol.ID))
	}
}

func TestMountManagerValidation(t *testing.T) {
	m := mustMountManager(t, t.TempDir(), newFakeNode())
	vol := &structs.Volume{ID: "v", ExternalID: "e", PluginID: "hostdir", AccessMode: structs.AccessModeSingleNodeWriter,
		AttachmentMode: structs.AttachmentModeFilesystem}
	other := vol.Copy()
	other.PluginID = "other"
	for name, call := range map[string]func() error{
		"alloc with ..":  func() error { _, err := m.MountVolume(testCtx(t), vol, "../x", false, nil); return err },
		"other plugin":   func() error { _, err := m.MountVolume(testCtx(t), other, "a", false, nil); return err },
		"bad volume id":  func() error { return m.UnmountVolume(testCtx(t), "a/b", "e", "a", usageOf(vol, false)) },
		"no access mode": func() error { return m.UnmountVolume(testCtx(t), "v", "e", "a", UsageOptions{}) },
	} {
		if err := call(); !errors.Is(err, structs.ErrInvalid) {
			t.Errorf("%s exp: invalid got: %v", name, err)
		}
	}
	if _, err := NewMountManager(MountManagerConfig{Root: "relative", PluginID: "p", Plugin: newFakeNode()}); err == nil {
		t.Error("relative root exp: refused got: accepted")
	}
}

// TestMountManagerLockHonoursContext: a mount queued behind a hung plugin
// call on the same volume gives up when its context ends.
func TestMountManagerLockHonoursContext(t *testing.T) {
	fake := newFakeNode()
	fake.block = make(chan struct{})
	m := mustMountManager(t, t.TempDir(), fake)
	vol := &structs.Volume{ID: "v", ExternalID: "e", PluginID: "hostdir", AccessMode: structs.AccessModeMultiNodeMultiWriter,
		AttachmentMode: structs.AttachmentModeFilesystem}

	first := make(chan error, 1)
	go func() { _, err := m.MountVolume(context.Background(), vol, "a1", false, nil); first <- err }()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if fake.inflightTotal() == 0 {
			return fmt.Errorf("first mount not in the plugin yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.MountVolume(ctx, vol, "a2", false, nil); !errors.Is(err, structs.ErrTimeout) {
		t.Fatalf("exp: timeout got: %v", err)
	}
	close(fake.block)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestMountManagerConcurrentUsage hammers a few volumes from many
// goroutines and checks the plugin-side invariants on every call: publish
// only on a staged path, never a redundant stage, unstage only when no
// publish remains, and never two calls for one volume at once.
func TestMountManagerConcurrentUsage(t *testing.T) {
	fake := newFakeNode()
	m := mustMountManager(t, t.TempDir(), fake)
	var vols []*structs.Volume
	for i := 0; i < 3; i++ {
		vols = append(vols, &structs.Volume{ID: fmt.Sprintf("v%d", i), ExternalID: fmt.Sprintf("e%d", i), PluginID: "hostdir",
			AccessMode: structs.AccessModeMultiNodeMultiWriter, AttachmentMode: structs.AttachmentModeFilesystem})
	}

	const workers, rounds = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			alloc := fmt.Sprintf("alloc-%d", w)
			ctx := context.Background()
			for r := 0; r < rounds; r++ {
				picked := map[*structs.Volume]bool{}
				for k := 0; k < 1+rng.IntN(3); k++ {
					v := vols[rng.IntN(len(vols))]
					picked[v] = true
					if _, err := m.MountVolume(ctx, v, alloc, false, nil); err != nil {
						errs <- err
						return
					}
				}
				for v := range picked {
					if err := m.UnmountVolume(ctx, v.ID, v.ExternalID, alloc, usageOf(v, false)); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.violations) > 0 {
		t.Fatalf("exp: no violations got: %d, first: %s", len(fake.violations), fake.violations[0])
	}
	if len(fake.staged) != 0 || len(fake.published) != 0 || fake.stages != fake.unstages || fake.stages == 0 {
		t.Fatalf("exp: everything released got: staged=%v published=%v stages=%d unstages=%d",
			fake.staged, fake.published, fake.stages, fake.unstages)
	}
	for _, v := range vols {
		if n := m.Users(v.ID); n != 0 {
			t.Fatalf("exp: no users of %s got: %d", v.ID, n)
		}
	}
}

// fakeNode is a node plugin that checks the order of calls it receives.
type fakeNode struct {
	mu         sync.Mutex
	staged     map[string]bool   // staging path
	published  map[string]string // target → staging path
	inflight   map[string]int    // by volume
	stages     int
	unstages   int
	violations []string
	block      chan struct{} // when set, NodeStage waits for it to close
}

func newFakeNode() *fakeNode {
	return &fakeNode{staged: map[string]bool{}, published: map[string]string{}, inflight: map[string]int{}}
}

func (f *fakeNode) enter(vol string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight[vol]++
	if f.inflight[vol] > 1 {
		f.violations = append(f.violations, "two calls at once for "+vol)
	}
}

func (f *fakeNode) leave(vol string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight[vol]--
}

func (f *fakeNode) inflightTotal() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, v := range f.inflight {
		n += v
	}
	return n
}

func (f *fakeNode) NodeStageVolume(ctx context.Context, req *NodeStageRequest) error {
	f.enter(req.VolumeID)
	defer f.leave(req.VolumeID)
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.staged[req.StagingPath] {
		f.violations = append(f.violations, "redundant stage of "+req.StagingPath)
	}
	f.staged[req.StagingPath] = true
	f.stages++
	return nil
}

func (f *fakeNode) NodeUnstageVolume(ctx context.Context, volumeID, stagingPath string) error {
	f.enter(volumeID)
	defer f.leave(volumeID)
	f.mu.Lock()
	defer f.mu.Unlock()
	for target, sp := range f.published {
		if sp == stagingPath {
			f.violations = append(f.violations, "unstage of "+stagingPath+" while published at "+target)
		}
	}
	if f.staged[stagingPath] {
		f.unstages++
	}
	delete(f.staged, stagingPath)
	return nil
}

func (f *fakeNode) NodePublishVolume(ctx context.Context, req *NodePublishRequest) error {
	f.enter(req.VolumeID)
	defer f.leave(req.VolumeID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.staged[req.StagingPath] {
		f.violations = append(f.violations, "publish from unstaged "+req.StagingPath)
	}
	f.published[req.TargetPath] = req.StagingPath
	return nil
}

func (f *fakeNode) NodeUnpublishVolume(ctx context.Context, volumeID, targetPath string) error {
	f.enter(volumeID)
	defer f.leave(volumeID)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.published, targetPath)
	return nil
}
