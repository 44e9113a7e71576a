package csi

import (
	"errors"
	"net/rpc"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestClientIdentityAndCapabilities(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	ctx := testCtx(t)

	info, err := c.GetPluginInfo(ctx)
	if err != nil || info.Name != hostdir.DefaultName || info.VendorVersion == "" {
		t.Fatalf("exp: hostdir info got: %+v %v", info, err)
	}
	pc, err := c.GetPluginCapabilities(ctx)
	if err != nil || !pc.ControllerService {
		t.Fatalf("exp: controller service got: %+v %v", pc, err)
	}
	if ready, err := c.Probe(ctx); err != nil || !ready {
		t.Fatalf("exp: ready got: %t %v", ready, err)
	}
	cc, err := c.ControllerGetCapabilities(ctx)
	if err != nil || !cc.PublishUnpublishVolume || !cc.PublishReadOnly {
		t.Fatalf("exp: publish capabilities got: %+v %v", cc, err)
	}
	ni, err := c.NodeGetInfo(ctx)
	if err != nil || ni.NodeID != "ext-node-1" {
		t.Fatalf("exp: node ext-node-1 got: %+v %v", ni, err)
	}
	nc, err := c.NodeGetCapabilities(ctx)
	if err != nil || !nc.StageUnstageVolume {
		t.Fatalf("exp: staging got: %+v %v", nc, err)
	}
}

// TestClientRoundTrip drives the whole attach and detach path over the
// socket and checks the plugin saw it in order.
func TestClientRoundTrip(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	ctx := testCtx(t)
	vol := tp.mustVolume(t, "vol1", structs.AccessModeSingleNodeWriter)
	vc := CapabilityOf(vol)
	dir := testutil.TempDir(t)
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "alloc", "target")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := c.ControllerValidateVolumeCapabilities(ctx, &ValidateRequest{VolumeID: vol.ExternalID, Capabilities: []VolumeCapability{vc}}); err != nil {
		t.Fatalf("exp: capabilities confirmed got: %v", err)
	}
	pubCtx, err := c.ControllerPublishVolume(ctx, &ControllerPublishRequest{VolumeID: vol.ExternalID, NodeID: "ext-node-1", Capability: vc})
	if err != nil || pubCtx[hostdir.PublishContextNode] != "ext-node-1" {
		t.Fatalf("exp: publish context for ext-node-1 got: %v %v", pubCtx, err)
	}
	if err := c.NodeStageVolume(ctx, &NodeStageRequest{VolumeID: vol.ExternalID, StagingPath: staging, Capability: vc, PublishContext: pubCtx}); err != nil {
		t.Fatal(err)
	}
	if err := c.NodePublishVolume(ctx, &NodePublishRequest{VolumeID: vol.ExternalID, StagingPath: staging, TargetPath: target, Capability: vc, PublishContext: pubCtx}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatalf("exp: published path writable got: %v", err)
	}

	// Detach twice: the second round finds nothing and still succeeds.
	for i := 0; i < 2; i++ {
		if err := c.NodeUnpublishVolume(ctx, vol.ExternalID, target); err != nil {
			t.Fatalf("round %d unpublish exp: ok got: %v", i, err)
		}
		if err := c.NodeUnstageVolume(ctx, vol.ExternalID, staging); err != nil {
			t.Fatalf("round %d unstage exp: ok got: %v", i, err)
		}
		if err := c.ControllerUnpublishVolume(ctx, vol.ExternalID, "ext-node-1", nil); err != nil {
			t.Fatalf("round %d controller unpublish exp: ok got: %v", i, err)
		}
	}

	got := tp.auditMethods(t, "ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume",
		"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume")
	want := []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume",
		"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume",
		"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"}
	if len(got) != len(want) {
		t.Fatalf("exp: %v got: %+v", want, got)
	}
	for i := range want {
		if got[i].Method != want[i] || got[i].Result != "ok" || got[i].Volume != vol.ExternalID {
			t.Fatalf("entry %d exp: %s ok got: %+v", i, want[i], got[i])
		}
	}
}

// TestClientDetachNothingMountedIsDone: seed 6. Plugins that pass umount's
// complaint through, or say NotFound, have nothing left to detach.
func TestClientDetachNothingMountedIsDone(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	ctx := testCtx(t)
	vol := tp.mustVolume(t, "vol1", structs.AccessModeSingleNodeWriter)
	target := filepath.Join(t.TempDir(), "target")

	cases := []struct {
		code, message string
		done          bool
	}{
		{"Internal", "umount: /x/target: no mount point specified", true},
		{"Internal", "umount: /x/target: not mounted.", true},
		{"NotFound", "volume gone", true},
		{"Internal", "umount: /x/target: target is busy", false},
		{"Unavailable", "not mounted", false}, // transport trouble is never done
	}
	for i, tc := range cases {
		for _, method := range []string{"NodeUnpublishVolume", "NodeUnstageVolume"} {
			tp.control(t, hostdir.Control{Seq: i, Fail: map[string]int{method: 1},
				FailCode: map[string]string{method: tc.code}, FailMessage: map[string]string{method: tc.message}})
			var err error
			if method == "NodeUnpublishVolume" {
				err = c.NodeUnpublishVolume(ctx, vol.ExternalID, target)
			} else {
				err = c.NodeUnstageVolume(ctx, vol.ExternalID, target)
			}
			if (err == nil) != tc.done {
				t.Errorf("%s %s %q exp: done=%t got: %v", method, tc.code, tc.message, tc.done, err)
			}
		}
	}
	// For the controller only NotFound counts.
	tp.control(t, hostdir.Control{Seq: 100, Fail: map[string]int{"ControllerUnpublishVolume": 2},
		FailCode:    map[string]string{"ControllerUnpublishVolume": "Internal"},
		FailMessage: map[string]string{"ControllerUnpublishVolume": "not mounted"}})
	if err := c.ControllerUnpublishVolume(ctx, vol.ExternalID, "ext-node-1", nil); err == nil {
		t.Error("exp: controller error kept got: nil")
	}
}

func TestClientTimeout(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 100*time.Millisecond)
	tp.control(t, hostdir.Control{Delay: map[string]string{"NodeGetInfo": "5s"}})
	start := time.Now()
	_, err := c.NodeGetInfo(testCtx(t))
	if !errors.Is(err, structs.ErrTimeout) {
		t.Fatalf("exp: timeout got: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("exp: cut short near 100ms got: %s", took)
	}
	if !structs.IsRetryable(err) {
		t.Fatalf("exp: retryable got: %v", err)
	}
}

func TestClientUnavailableWithoutSocket(t *testing.T) {
	c, err := NewClient(filepath.Join(t.TempDir(), "missing.sock"), ClientOptions{PluginID: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Probe(testCtx(t))
	if !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("exp: unavailable got: %v", err)
	}
	// Nothing mounted cannot be concluded from a plugin that is not there.
	if err := c.NodeUnpublishVolume(testCtx(t), "v", "/t"); !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("exp: unavailable got: %v", err)
	}
}

// TestClientErrorSurvivesRPCHop: net/rpc flattens errors to strings; the
// code prefix brings errors.Is back on the far side.
func TestClientErrorSurvivesRPCHop(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	_, err := c.ControllerPublishVolume(testCtx(t), &ControllerPublishRequest{VolumeID: "nope", NodeID: "ext-node-1",
		Capability: VolumeCapability{AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}})
	if !errors.Is(err, structs.ErrNotFound) || status.Code(err) != codes.NotFound {
		t.Fatalf("exp: not found got: %v", err)
	}
	flat := structs.ParseError(rpc.ServerError(err.Error()))
	if !errors.Is(flat, structs.ErrNotFound) || !strings.Contains(flat.Error(), "ControllerPublishVolume") {
		t.Fatalf("exp: not_found after the hop got: %v", flat)
	}
}

func TestSocketPath(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///run/csi.sock": "/run/csi.sock", "unix:rel.sock": "rel.sock", "/plain.sock": "/plain.sock",
	} {
		if got, err := SocketPath(in); err != nil || got != want {
			t.Errorf("%s exp: %s got: %s %v", in, want, got, err)
		}
	}
	for _, bad := range []string{"", "unix://", "tcp://1.2.3.4:5"} {
		if _, err := SocketPath(bad); err == nil {
			t.Errorf("%q exp: error got: nil", bad)
		}
	}
}
