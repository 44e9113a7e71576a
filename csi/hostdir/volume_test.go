package hostdir

import (
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func createReq(name string, required int64) *csipb.CreateVolumeRequest {
	return &csipb.CreateVolumeRequest{
		Name:               name,
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: required},
	}
}

func mustWriteFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func expectFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("exp: %s holding %q got: %q (%v)", path, want, got, err)
	}
}

func TestCreateVolumeIsIdempotentByNameAndParameters(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	req := createReq("pgdata", 1<<20)
	req.Parameters = map[string]string{"tier": "fast"}
	first, err := c.ctrl.CreateVolume(ctx(t), req)
	if err != nil {
		t.Fatalf("exp: created got: %v", err)
	}
	again, err := c.ctrl.CreateVolume(ctx(t), req)
	if err != nil || again.GetVolume().GetVolumeId() != first.GetVolume().GetVolumeId() || again.GetVolume().GetCapacityBytes() != 1<<20 {
		t.Fatalf("exp: the same volume %v got: %v (%v)", first.GetVolume(), again.GetVolume(), err)
	}
	req.Parameters = map[string]string{"tier": "slow"}
	_, err = c.ctrl.CreateVolume(ctx(t), req)
	expectCode(t, err, codes.AlreadyExists)
}

func TestCreateVolumeFromSnapshotAndCloneCopiesData(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	src := mustCreateVolume(t, c, "src")
	mustWriteFile(t, filepath.Join(p.VolumePath(src), "a"), "before")

	snap, err := c.ctrl.CreateSnapshot(ctx(t), &csipb.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: src})
	if err != nil || !snap.GetSnapshot().GetReadyToUse() {
		t.Fatalf("exp: a ready snapshot got: %v (%v)", snap, err)
	}
	// The snapshot is a copy: later writes to the source are not in it.
	mustWriteFile(t, filepath.Join(p.VolumePath(src), "a"), "after")

	fromSnap := createReq("restored", 0)
	fromSnap.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()},
	}}
	restored, err := c.ctrl.CreateVolume(ctx(t), fromSnap)
	if err != nil || restored.GetVolume().GetContentSource().GetSnapshot() == nil {
		t.Fatalf("exp: a volume from the snapshot got: %v (%v)", restored, err)
	}
	expectFile(t, filepath.Join(p.VolumePath(restored.GetVolume().GetVolumeId()), "a"), "before")

	clone := createReq("clone", 0)
	clone.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
		Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: src},
	}}
	cloned, err := c.ctrl.CreateVolume(ctx(t), clone)
	if err != nil {
		t.Fatalf("exp: a clone got: %v", err)
	}
	expectFile(t, filepath.Join(p.VolumePath(cloned.GetVolume().GetVolumeId()), "a"), "after")

	// The same name from another source is another volume.
	otherSource := createReq("clone", 0)
	otherSource.VolumeContentSource = fromSnap.VolumeContentSource
	_, err = c.ctrl.CreateVolume(ctx(t), otherSource)
	expectCode(t, err, codes.AlreadyExists)

	missing := createReq("from-nothing", 0)
	missing.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "no-such-snap"},
	}}
	_, err = c.ctrl.CreateVolume(ctx(t), missing)
	expectCode(t, err, codes.NotFound)
}

func TestCreateVolumeAllocatesFromConfiguredCapacity(t *testing.T) {
	p := mustStartPlugin(t, Config{Capacity: 100})
	c := mustDial(t, p)
	if _, err := c.ctrl.CreateVolume(ctx(t), createReq("a", 60)); err != nil {
		t.Fatalf("exp: created got: %v", err)
	}
	capResp, err := c.ctrl.GetCapacity(ctx(t), &csipb.GetCapacityRequest{})
	if err != nil || capResp.GetAvailableCapacity() != 40 {
		t.Fatalf("exp: 40 bytes free got: %v (%v)", capResp, err)
	}
	_, err = c.ctrl.CreateVolume(ctx(t), createReq("b", 41))
	expectCode(t, err, codes.ResourceExhausted)
}

func TestListVolumesPagesByToken(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	for _, n := range []string{"v1", "v2", "v3"} {
		mustCreateVolume(t, c, n)
	}
	first, err := c.ctrl.ListVolumes(ctx(t), &csipb.ListVolumesRequest{MaxEntries: 2})
	if err != nil || len(first.GetEntries()) != 2 || first.GetNextToken() == "" {
		t.Fatalf("exp: 2 entries and a token got: %v (%v)", first, err)
	}
	// A volume deleted between pages does not shift the next page.
	if _, err := c.ctrl.DeleteVolume(ctx(t), &csipb.DeleteVolumeRequest{VolumeId: "v1"}); err != nil {
		t.Fatal(err)
	}
	rest, err := c.ctrl.ListVolumes(ctx(t), &csipb.ListVolumesRequest{StartingToken: first.GetNextToken()})
	if err != nil || len(rest.GetEntries()) != 1 || rest.GetEntries()[0].GetVolume().GetVolumeId() != "v3" || rest.GetNextToken() != "" {
		t.Fatalf("exp: v3 alone got: %v (%v)", rest, err)
	}
	_, err = c.ctrl.ListVolumes(ctx(t), &csipb.ListVolumesRequest{StartingToken: "bogus"})
	expectCode(t, err, codes.Aborted)
}

func TestListSnapshotsFilters(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	a, b := mustCreateVolume(t, c, "a"), mustCreateVolume(t, c, "b")
	for name, vol := range map[string]string{"s1": a, "s2": a, "s3": b} {
		if _, err := c.ctrl.CreateSnapshot(ctx(t), &csipb.CreateSnapshotRequest{Name: name, SourceVolumeId: vol}); err != nil {
			t.Fatal(err)
		}
	}
	bySource, err := c.ctrl.ListSnapshots(ctx(t), &csipb.ListSnapshotsRequest{SourceVolumeId: a})
	if err != nil || len(bySource.GetEntries()) != 2 {
		t.Fatalf("exp: 2 snapshots of a got: %v (%v)", bySource, err)
	}
	byID, err := c.ctrl.ListSnapshots(ctx(t), &csipb.ListSnapshotsRequest{SnapshotId: "s3"})
	if err != nil || len(byID.GetEntries()) != 1 || byID.GetEntries()[0].GetSnapshot().GetSourceVolumeId() != b {
		t.Fatalf("exp: s3 of b got: %v (%v)", byID, err)
	}
	if _, err := c.ctrl.DeleteSnapshot(ctx(t), &csipb.DeleteSnapshotRequest{SnapshotId: "s3"}); err != nil {
		t.Fatal(err)
	}
	gone, err := c.ctrl.ListSnapshots(ctx(t), &csipb.ListSnapshotsRequest{SnapshotId: "s3"})
	if err != nil || len(gone.GetEntries()) != 0 {
		t.Fatalf("exp: no s3 after delete got: %v (%v)", gone, err)
	}
}

// With auto-create on (the dev agent's plugin), CreateVolume still makes a
// new volume with the capacity asked for: looking it up must not create it
// empty first (which made CreateVolume refuse it as an existing volume of
// size 0).
func TestCreateVolumeWithAutoCreateMakesTheVolumeAsked(t *testing.T) {
	p := mustStartPlugin(t, Config{AutoCreateVolumes: true})
	c := mustDial(t, p)
	resp, err := c.ctrl.CreateVolume(ctx(t), createReq("made", 1<<20))
	if err != nil || resp.GetVolume().GetCapacityBytes() != 1<<20 {
		t.Fatalf("exp: a volume of 1 MiB got: %v (%v)", resp.GetVolume(), err)
	}
	again, err := c.ctrl.CreateVolume(ctx(t), createReq("made", 1<<20))
	if err != nil || again.GetVolume().GetVolumeId() != resp.GetVolume().GetVolumeId() {
		t.Fatalf("exp: the same volume again got: %v (%v)", again.GetVolume(), err)
	}
}
