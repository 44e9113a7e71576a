package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
	"github.com/hashicorp/go-hclog"
)

// testPlugin is a hostdir plugin served in-process on a real unix socket.
type testPlugin struct {
	*hostdir.Plugin
	root        string
	socket      string
	audit       string
	controlFile string
}

// mustNewPlugin starts a monolith hostdir plugin with an audit log and a
// control file; edit lets a test change the config first.
func mustNewPlugin(t *testing.T, edit func(*hostdir.Config)) *testPlugin {
	t.Helper()
	dir := testutil.TempDir(t)
	// Unix socket paths are limited to 108 bytes; keep them short.
	sockDir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	tp := &testPlugin{
		root:        filepath.Join(dir, "root"),
		socket:      filepath.Join(sockDir, "p.sock"),
		audit:       filepath.Join(dir, "audit.log"),
		controlFile: filepath.Join(dir, "control.json"),
	}
	cfg := hostdir.Config{
		Endpoint:    "unix://" + tp.socket,
		Root:        tp.root,
		NodeID:      "ext-node-1",
		AuditLog:    tp.audit,
		ControlFile: tp.controlFile,
		Logger:      testLogger(t),
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := hostdir.New(cfg)
	if err != nil {
		t.Fatalf("exp: plugin created got: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("exp: plugin started got: %v", err)
	}
	t.Cleanup(p.Stop)
	tp.Plugin = p
	return tp
}

// mustVolume makes a volume directory the way an operator would for a
// hostdir volume registered by hand, and returns its claimd spec.
func (tp *testPlugin) mustVolume(t *testing.T, id string, mode structs.AccessMode) *structs.Volume {
	t.Helper()
	ext := "ext-" + id
	if err := os.MkdirAll(tp.VolumePath(ext), 0o755); err != nil {
		t.Fatal(err)
	}
	return &structs.Volume{ID: id, ExternalID: ext, PluginID: "hostdir", AccessMode: mode,
		AttachmentMode: structs.AttachmentModeFilesystem}
}

func (tp *testPlugin) control(t *testing.T, c hostdir.Control) {
	t.Helper()
	if err := hostdir.WriteControl(tp.controlFile, c); err != nil {
		t.Fatal(err)
	}
}

// auditMethods lists the audited calls of the given methods, in order.
func (tp *testPlugin) auditMethods(t *testing.T, methods ...string) []hostdir.AuditEntry {
	t.Helper()
	all, err := hostdir.ReadAudit(tp.audit)
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[string]bool)
	for _, m := range methods {
		want[m] = true
	}
	var out []hostdir.AuditEntry
	for _, e := range all {
		if want[e.Method] {
			out = append(out, e)
		}
	}
	return out
}

func mustClient(t *testing.T, tp *testPlugin, timeout time.Duration) *Client {
	t.Helper()
	c, err := NewClient("unix://"+tp.socket, ClientOptions{PluginID: "hostdir", Timeout: timeout, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

// unmountA1ThenA2 unmounts a volume used by allocations a1 and a2 on m:
// the first unmount must leave it staged (a2 still uses it), the second
// unstage it, once.
func unmountA1ThenA2(t *testing.T, ctx context.Context, tp *testPlugin, m *MountManager, vol *structs.Volume) {
	t.Helper()
	if err := m.UnmountVolume(ctx, vol.ID, vol.ExternalID, "a1", usageOf(vol, false)); err != nil {
		t.Fatal(err)
	}
	if n := len(tp.auditMethods(t, "NodeUnstageVolume")); n != 0 {
		t.Fatalf("exp: not unstaged while a2 uses it got: %d unstages", n)
	}
	if err := m.UnmountVolume(ctx, vol.ID, vol.ExternalID, "a2", usageOf(vol, false)); err != nil {
		t.Fatal(err)
	}
	if n := len(tp.auditMethods(t, "NodeUnstageVolume")); n != 1 {
		t.Fatalf("exp: unstaged once got: %d", n)
	}
}
