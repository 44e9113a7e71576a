package hostdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/testutil"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
)

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})
}

func writeRaw(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

// TestAuditLogOrder: the audit log has one line per call in the order the
// calls finished, with the fields tests use to check release ordering.
func TestAuditLogOrder(t *testing.T) {
	dir := testutil.TempDir(t)
	audit := filepath.Join(dir, "audit.log")
	p := mustStartPlugin(t, Config{AuditLog: audit, MountMethod: MountSymlink, Fail: map[string]int{"NodeUnpublishVolume": 1}})
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "audited")
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")

	expectCode(t, publish(t, c, vol, "node-1", snw, false), codes.OK)
	expectCode(t, stage(t, c, vol, staging), codes.OK)
	expectCode(t, nodePublish(t, c, vol, staging, target, false), codes.OK)
	expectCode(t, unpublish(t, c, vol, target), codes.Unavailable)
	expectCode(t, unpublish(t, c, vol, target), codes.OK)
	expectCode(t, unstage(t, c, vol, staging), codes.OK)

	entries, err := ReadAudit(audit)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ method, node, target, result string }{
		{"CreateVolume", "", "", "ok"},
		{"ControllerPublishVolume", "node-1", "", "ok"},
		{"NodeStageVolume", "node-1", staging, "ok"},
		{"NodePublishVolume", "node-1", target, "ok"},
		{"NodeUnpublishVolume", "node-1", target, "injected failure"},
		{"NodeUnpublishVolume", "node-1", target, "ok"},
		{"NodeUnstageVolume", "node-1", staging, "ok"},
	}
	if len(entries) != len(want) {
		t.Fatalf("exp: %d entries got: %d %+v", len(want), len(entries), entries)
	}
	for i, w := range want {
		e := entries[i]
		if e.Method != w.method || e.Node != w.node || e.Target != w.target || !strings.Contains(e.Result, w.result) {
			t.Errorf("entry %d exp: %+v got: %+v", i, w, e)
		}
		// CreateVolume's line names the volume it made.
		if e.Volume != vol {
			t.Errorf("entry %d exp: volume %s got: %s", i, vol, e.Volume)
		}
		if i > 0 && e.Time.Before(entries[i-1].Time) {
			t.Errorf("entry %d exp: time not before the previous got: %s < %s", i, e.Time, entries[i-1].Time)
		}
	}

	raw, _ := os.ReadFile(audit)
	first := strings.SplitN(string(raw), "\n", 2)[0]
	for _, key := range []string{`"time":`, `"method":`, `"volume":`, `"node":`, `"target":`, `"result":`} {
		if !strings.Contains(first, key) {
			t.Errorf("exp: key %s in %s", key, first)
		}
	}
}

// TestAuditLogRecordsVolumeLifecycle: snapshot, restore and expansion
// calls are audited with the IDs they named or made.
func TestAuditLogRecordsVolumeLifecycle(t *testing.T) {
	audit := filepath.Join(testutil.TempDir(t), "audit.log")
	p := mustStartPlugin(t, Config{AuditLog: audit})
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "src")
	if _, err := c.ctrl.CreateSnapshot(ctx(t), &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol}); err != nil {
		t.Fatal(err)
	}
	restore := createReq("restored", 0)
	restore.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap"},
	}}
	if _, err := c.ctrl.CreateVolume(ctx(t), restore); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ctrl.ControllerExpandVolume(ctx(t), &csipb.ControllerExpandVolumeRequest{
		VolumeId: "restored", CapacityRange: &csipb.CapacityRange{RequiredBytes: 10},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ctrl.DeleteSnapshot(ctx(t), &csipb.DeleteSnapshotRequest{SnapshotId: "snap"}); err != nil {
		t.Fatal(err)
	}
	entries, err := ReadAudit(audit)
	if err != nil {
		t.Fatal(err)
	}
	want := []AuditEntry{
		{Method: "CreateVolume", Volume: vol, Result: "ok"},
		{Method: "CreateSnapshot", Volume: vol, Snapshot: "snap", Result: "ok"},
		{Method: "CreateVolume", Volume: "restored", Snapshot: "snap", Result: "ok"},
		{Method: "ControllerExpandVolume", Volume: "restored", Result: "ok"},
		{Method: "DeleteSnapshot", Snapshot: "snap", Result: "ok"},
	}
	if len(entries) != len(want) {
		t.Fatalf("exp: %d entries got: %+v", len(want), entries)
	}
	for i, w := range want {
		e := entries[i]
		if e.Method != w.Method || e.Volume != w.Volume || e.Snapshot != w.Snapshot || e.Result != w.Result {
			t.Errorf("entry %d exp: %+v got: %+v", i, w, e)
		}
	}
}

func TestReadAuditMissingFileIsEmpty(t *testing.T) {
	entries, err := ReadAudit(filepath.Join(t.TempDir(), "none"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("exp: empty got: %v %v", entries, err)
	}
}
