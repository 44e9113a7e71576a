package hostdir

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testutil"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func nodeInfo(t *testing.T, c clients) error {
	t.Helper()
	_, err := c.node.NodeGetInfo(ctx(t), &csipb.NodeGetInfoRequest{})
	return err
}

func TestFailFlagFailsNextNCalls(t *testing.T) {
	p := mustStartPlugin(t, Config{Fail: map[string]int{"NodeGetInfo": 2}})
	c := mustDial(t, p)
	expectCode(t, nodeInfo(t, c), codes.Unavailable)
	expectCode(t, nodeInfo(t, c), codes.Unavailable)
	expectCode(t, nodeInfo(t, c), codes.OK)
	// Other methods are not affected.
	_, err := c.id.Probe(ctx(t), &csipb.ProbeRequest{})
	expectCode(t, err, codes.OK)
}

func TestDelayFlagHonoursCallerDeadline(t *testing.T) {
	p := mustStartPlugin(t, Config{Delay: map[string]time.Duration{"NodeGetInfo": 5 * time.Second}})
	c := mustDial(t, p)
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.node.NodeGetInfo(cctx, &csipb.NodeGetInfoRequest{})
	expectCode(t, err, codes.DeadlineExceeded)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("exp: the deadline cut the delay short got: %s", took)
	}
	// Stop must not wait out the 5 s delay of the abandoned call: its
	// handler sees the cancellation.
	stopped := time.Now()
	p.Stop()
	if took := time.Since(stopped); took > 3*time.Second {
		t.Fatalf("exp: prompt stop got: %s", took)
	}
}

func TestControlFileArmsOnContentChange(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "control.json")
	p := mustStartPlugin(t, Config{ControlFile: ctl})
	c := mustDial(t, p)
	expectCode(t, nodeInfo(t, c), codes.OK) // no file: no faults

	if err := WriteControl(ctl, Control{Fail: map[string]int{"NodeGetInfo": 1}}); err != nil {
		t.Fatal(err)
	}
	expectCode(t, nodeInfo(t, c), codes.Unavailable)
	expectCode(t, nodeInfo(t, c), codes.OK) // consumed; same content does not re-arm

	if err := WriteControl(ctl, Control{Seq: 2, Fail: map[string]int{"NodeGetInfo": 1},
		FailCode: map[string]string{"NodeGetInfo": "INTERNAL"}, FailMessage: map[string]string{"NodeGetInfo": "umount: no mount point"}}); err != nil {
		t.Fatal(err)
	}
	err := nodeInfo(t, c)
	expectCode(t, err, codes.Internal)
	if msg := status.Convert(err).Message(); msg != "umount: no mount point" {
		t.Fatalf("exp: the configured message got: %q", msg)
	}

	// New content drops what is left of the old counts.
	if err := WriteControl(ctl, Control{Seq: 3, Fail: map[string]int{"NodeGetInfo": 5}}); err != nil {
		t.Fatal(err)
	}
	expectCode(t, nodeInfo(t, c), codes.Unavailable)
	if err := WriteControl(ctl, Control{}); err != nil {
		t.Fatal(err)
	}
	expectCode(t, nodeInfo(t, c), codes.OK)
}

func TestControlFileDelay(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "control.json")
	p := mustStartPlugin(t, Config{ControlFile: ctl})
	c := mustDial(t, p)
	if err := WriteControl(ctl, Control{Delay: map[string]string{"NodeGetInfo": "300ms"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	expectCode(t, nodeInfo(t, c), codes.OK)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("exp: at least 300ms got: %s", took)
	}
}

func TestControlFileExitStopsInProcessPlugin(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "control.json")
	audit := filepath.Join(t.TempDir(), "audit.log")
	p := mustStartPlugin(t, Config{ControlFile: ctl, AuditLog: audit})
	c := mustDial(t, p)
	if err := WriteControl(ctl, Control{Exit: true}); err != nil {
		t.Fatal(err)
	}
	expectCode(t, nodeInfo(t, c), codes.Unavailable)
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("exp: plugin stopped got: still serving")
	}
	entries, err := ReadAudit(audit)
	if err != nil || len(entries) != 1 || !strings.Contains(entries[0].Result, "exiting") {
		t.Fatalf("exp: one audit entry for the exit got: %+v %v", entries, err)
	}
}

// TestControlFileHalfWrittenIsIgnored: a control file caught mid-write
// does not parse; the plugin keeps the faults it had until it does.
func TestControlFileHalfWrittenIsIgnored(t *testing.T) {
	f := newFaults(Config{ControlFile: filepath.Join(t.TempDir(), "c.json"), Logger: testLogger(t)})
	if err := WriteControl(f.ctrlPath, Control{Fail: map[string]int{"Probe": 2}}); err != nil {
		t.Fatal(err)
	}
	if f.next("Probe").fail == nil {
		t.Fatal("exp: first Probe fails got: ok")
	}
	if err := writeRaw(f.ctrlPath, `{"fail":{"Pro`); err != nil {
		t.Fatal(err)
	}
	if f.next("Probe").fail == nil {
		t.Fatal("exp: second Probe still fails got: ok")
	}
	if f.next("Probe").fail != nil {
		t.Fatal("exp: third Probe succeeds got: failure")
	}
}

func TestParseCode(t *testing.T) {
	for in, want := range map[string]codes.Code{
		"Internal": codes.Internal, "NOT_FOUND": codes.NotFound, "failedprecondition": codes.FailedPrecondition,
	} {
		if got, ok := parseCode(in); !ok || got != want {
			t.Errorf("exp: %s got: %s", want, got)
		}
	}
	if _, ok := parseCode("nonsense"); ok {
		t.Error("exp: unknown code refused got: accepted")
	}
}

func TestConfigRefusesUnknownMethod(t *testing.T) {
	_, err := New(Config{Root: testutil.TempDir(t), NodeID: "n", Fail: map[string]int{"NodeStage": 1}})
	if err == nil || !strings.Contains(err.Error(), "NodeStage") {
		t.Fatalf("exp: unknown method refused got: %v", err)
	}
}

// delay_after holds the answer back after the work is done: a caller that
// gives up meanwhile sees an error, yet the volume exists, and a repeat
// by name finds it (what a leader dying before its register entry needs).
func TestControlFileDelayAfterHoldsTheAnswerNotTheWork(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "control.json")
	p := mustStartPlugin(t, Config{ControlFile: ctl})
	c := mustDial(t, p)
	if err := WriteControl(ctl, Control{DelayAfter: map[string]string{"CreateVolume": "5s"}}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.ctrl.CreateVolume(cctx, createReq("held", 1<<20))
	expectCode(t, err, codes.DeadlineExceeded)
	list, err := c.ctrl.ListVolumes(ctx(t), &csipb.ListVolumesRequest{})
	if err != nil || len(list.GetEntries()) != 1 {
		t.Fatalf("volumes after a held answer exp: 1 got: %v (%v)", list.GetEntries(), err)
	}
	if err := WriteControl(ctl, Control{}); err != nil {
		t.Fatal(err)
	}
	again, err := c.ctrl.CreateVolume(ctx(t), createReq("held", 1<<20))
	if err != nil || again.GetVolume().GetVolumeId() != list.GetEntries()[0].GetVolume().GetVolumeId() {
		t.Fatalf("repeat exp: the same volume got: %v (%v)", again.GetVolume(), err)
	}
}
