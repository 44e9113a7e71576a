package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// Storage truth (issue 27, decision 40): the storage and the record are
// made to disagree both ways behind claimd's back — an attachment no claim
// knows of, a claim whose attachment was removed, a volume claimd does not
// know — and reconciliation finds each, reports it (CLI exit 2, volume
// status, the recorded report), repairs only the orphan of a fence-policy
// volume and only after its grace, and shows the storage before a forced
// detach.
func TestReconcile_FindsBothWaysAndRepairsOnlyWhatIsSafe(t *testing.T) {
	const grace = 2 * time.Second
	e := newReleaseEnvOpts(t, harness.Options{Configure: func(cfg *server.Config) {
		cfg.ReconcileInterval = -1 // rounds only when asked: the test decides when
		cfg.ReconcileRepairGrace = grace
	}}, nil, "w1", "w2")
	for _, v := range []struct {
		id     string
		policy structs.NodeLostPolicy
	}{{"v1", structs.NodeLostFence}, {"v2", structs.NodeLostWait}, {"v3", structs.NodeLostFence}} {
		vol := testVolume(v.id)
		vol.NodeLost = v.policy
		if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), vol); err != nil {
			t.Fatal(err)
		}
	}
	// The volumes exist on the storage (registered volumes are made on
	// first use otherwise).
	for _, ext := range []string{"ext-v2", "ext-v3"} {
		if err := os.MkdirAll(filepath.Join(e.root, "volumes", ext), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	cli := func(args ...string) harness.CLIResult { return harness.RunCLIEnv(t, e.cliEnv(t), args...) }

	// Everything agrees at first.
	if r := cli("volume", "reconcile"); r.Code != 0 || !strings.Contains(r.Stdout, "The storage agrees with the record") {
		t.Fatalf("reconcile of an agreeing storage exp: exit 0, agrees got: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	// Behind claimd's back: v1's attachment to w1 removed (a1 still
	// claims it), v2 and v3 attached to w2 (no claim), a stray volume.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(hostdir.StorageDetach(e.root, "ext-v1", "ext-w1"))
	must(hostdir.StorageAttach(e.root, "ext-v2", "ext-w2", false))
	must(hostdir.StorageAttach(e.root, "ext-v3", "ext-w2", false))
	must(os.MkdirAll(filepath.Join(e.root, "volumes", "stray"), 0o755))

	r := cli("volume", "reconcile")
	if r.Code != 2 {
		t.Fatalf("reconcile with disagreements exp: exit 2 got: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	want := map[string]bool{"missing v1 ext-v1 " + e.clients["w1"].NodeID() + " a1": true,
		"orphan v2 ext-v2 " + e.clients["w2"].NodeID(): true, "orphan v3 ext-v3 " + e.clients["w2"].NodeID(): true,
		"unknown-volume - stray": true}
	for line := range want {
		found := false
		for _, l := range strings.Split(r.Stdout, "\n") {
			found = found || strings.HasPrefix(strings.Join(strings.Fields(l), " "), line)
		}
		if !found {
			t.Fatalf("reconcile report exp: a line %q got:\n%s", line, r.Stdout)
		}
	}
	reports, _, err := e.api.StorageReports(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
	if err != nil || len(reports) != 1 || len(reports[0].Findings) != 4 {
		t.Fatalf("recorded report exp: 4 findings got: %+v %v", reports, err)
	}
	// Every server has the same report (it is in Raft).
	e.c.WaitForApplied(reports[0].ModifyIndex, 10*time.Second)
	for _, s := range e.c.Servers {
		got, _ := s.Server().State().StorageReport(nil, "hostdir")
		if got == nil || len(got.Findings) != 4 {
			t.Fatalf("report on %s exp: the same 4 findings got: %+v", s.Name, got)
		}
	}
	if st := cli("volume", "status", "v1"); !strings.Contains(st.Stdout, "Disagrees with the record") || !strings.Contains(st.Stdout, "claim recorded as attached; the storage does not show it") {
		t.Fatalf("volume status v1 exp: the missing attachment got:\n%s", st.Stdout)
	}

	// After the grace, the next round detaches v3's orphan (fence), not
	// v2's (wait), and never v1's (its claim is live).
	harness.WaitFor(t, 30*time.Second, func() error {
		resp, err := e.api.ReconcileVolumes(harness.Ctx(t, 30*time.Second), "")
		if err != nil {
			return err
		}
		for _, f := range resp.Reports[0].Findings {
			if f.VolumeID == "v3" && !f.RepairedAt.IsZero() {
				return nil
			}
		}
		return fmt.Errorf("v3's orphan exp: repaired after %s got: %+v", grace, resp.Reports[0].Findings)
	})
	v3Storage, err := e.api.VolumeStorage(harness.Ctx(t, 10*time.Second), "v3")
	if err != nil || !v3Storage.Found || len(v3Storage.PublishedNodes) != 0 {
		t.Fatalf("v3 on the storage after the repair exp: attached nowhere got: %+v %v", v3Storage, err)
	}
	v2Storage, err := e.api.VolumeStorage(harness.Ctx(t, 10*time.Second), "v2")
	if err != nil || len(v2Storage.PublishedNodes) != 1 {
		t.Fatalf("v2 (wait policy) on the storage exp: still attached to w2 got: %+v %v", v2Storage, err)
	}
	v3, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "v3", structs.QueryOptions{})
	if err != nil || len(v3.Repairs) != 1 || v3.Repairs[0].ExternalNodeID != "ext-w2" {
		t.Fatalf("v3's repair exp: recorded on the volume got: %+v %v", v3, err)
	}
	if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-v1", ""); n != 0 {
		t.Fatalf("v1 (a live claim) exp: never detached got: %d controller detaches", n)
	}
	if st := cli("volume", "status", "v3"); !strings.Contains(st.Stdout, "orphan-detached") {
		t.Fatalf("volume status v3 exp: the repair in the timeline got:\n%s", st.Stdout)
	}

	// A forced detach first says what the storage has.
	res := cli("volume", "detach", "-force", "v2", e.clients["w2"].NodeID())
	if !strings.Contains(res.Stderr, "Storage, before this detach: v2 is attached to: ext-w2 (node "+e.clients["w2"].NodeID()+")") {
		t.Fatalf("volume detach -force exp: the storage's view first got: %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// Volume health (issue 27): a volume the storage reports degraded is found
// abnormal, shown with what the storage said, and — when its spec asks —
// refuses new claims until a round finds it healthy again; the
// allocation waiting for it then runs by itself.
func TestReconcile_AbnormalVolumeRefusesNewClaimsUntilHealthy(t *testing.T) {
	e := newReleaseEnvOpts(t, harness.Options{Configure: func(cfg *server.Config) { cfg.ReconcileInterval = -1 }}, nil, "w1")
	vol := testVolume("v1")
	vol.RefuseClaimsWhenAbnormal = true
	if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), vol); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.root, "volumes", "ext-v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := hostdir.StorageSetHealth(e.root, "ext-v1", hostdir.HealthStatus{Type: "DEGRADED", Reason: "disk failing"}); err != nil {
		t.Fatal(err)
	}
	resp, err := e.api.ReconcileVolumes(harness.Ctx(t, 30*time.Second), "v1")
	if err != nil {
		t.Fatal(err)
	}
	f := resp.Reports[0].ForVolume("v1")
	if len(f) != 1 || f[0].Kind != structs.FindingAbnormal || f[0].Message != "DEGRADED: disk failing" {
		t.Fatalf("findings exp: v1 abnormal, DEGRADED: disk failing got: %+v", f)
	}
	e.run(t, "a1", "w1", "v1")
	_, err = e.api.Claim(harness.Ctx(t, 10*time.Second), &structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: e.clients["w1"].NodeID(), Mode: structs.ClaimModeWrite})
	if err == nil || !strings.Contains(err.Error(), "abnormal on the storage (DEGRADED: disk failing") {
		t.Fatalf("claim on an abnormal volume exp: refused naming the condition got: %v", err)
	}
	if st := harness.RunCLIEnv(t, e.cliEnv(t), "volume", "status", "v1"); !strings.Contains(st.Stdout, "the storage reports: DEGRADED: disk failing") {
		t.Fatalf("volume status exp: the condition got:\n%s", st.Stdout)
	}
	if a, _, _ := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{}); a.ClientStatus == structs.AllocClientRunning {
		t.Fatal("allocation on an abnormal volume exp: waiting got: running")
	}
	if err := hostdir.StorageSetHealth(e.root, "ext-v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.ReconcileVolumes(harness.Ctx(t, 30*time.Second), "v1"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
}

// A snapshot restore makes the record older than the nodes: a volume
// mounted and in use on w1 has no claim in the restored record, so the
// storage's attachment looks like an orphan. The reconciler asks w1
// before it repairs: while w1 has the volume mounted (its agent stops the
// allocation the record no longer knows, but the unmount fails here), the
// attachment stays, whatever the grace (it used to be detached from under
// the running workload under node_lost fence); once w1 has unmounted it,
// the repair may go ahead, and never before.
func TestReconcile_RestoredRecordNeverDetachesAMountInUse(t *testing.T) {
	const grace = time.Second
	e := newReleaseEnvOpts(t, harness.Options{Configure: func(cfg *server.Config) {
		cfg.ReconcileInterval = -1
		cfg.ReconcileRepairGrace = grace
	}}, nil, "w1")
	vol := testVolume("v1")
	vol.NodeLost = structs.NodeLostFence
	if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), vol); err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if _, err := e.api.SnapshotSave(harness.Ctx(t, 30*time.Second), &backup, api.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	// w1 cannot unmount for now: the volume stays in use there.
	e.nodes["w1"].SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1000000}})
	if err := e.api.SnapshotRestore(harness.Ctx(t, 30*time.Second), &backup, api.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}

	// Rounds past the grace: the orphan is found, asked about, and kept.
	round := func() []*structs.StorageFinding {
		resp, err := e.api.ReconcileVolumes(harness.Ctx(t, 30*time.Second), "")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Reports[0].Findings
	}
	start := time.Now()
	harness.WaitFor(t, 30*time.Second, func() error {
		for _, f := range round() {
			if f.VolumeID == "v1" && f.Kind == structs.FindingOrphan && !f.RepairedAt.IsZero() {
				t.Fatalf("v1's attachment exp: kept while w1 has it mounted got: repaired at %s", f.RepairedAt)
			}
		}
		if time.Since(start) < 3*grace {
			return fmt.Errorf("rounds for %s so far", time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
	if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-v1", ""); n != 0 {
		t.Fatalf("controller unpublish of the mounted volume exp: 0 got: %d", n)
	}

	// w1 can unmount again: its agent finishes the stop, and then (only
	// then) the orphan may be repaired.
	e.nodes["w1"].SetControl(hostdir.Control{Seq: 1})
	harness.WaitFor(t, 60*time.Second, func() error {
		for _, f := range round() {
			if f.VolumeID == "v1" && !f.RepairedAt.IsZero() {
				return nil
			}
		}
		return fmt.Errorf("v1's orphan exp: repaired once w1 unmounted it got: not yet")
	})
	var unmounted, detached time.Time
	for _, en := range e.nodes["w1"].Audit() {
		if en.Method == "NodeUnpublishVolume" && en.Volume == "ext-v1" && en.Result == "ok" && unmounted.IsZero() {
			unmounted = en.Time
		}
	}
	for _, en := range e.controller.Audit() {
		if en.Method == "ControllerUnpublishVolume" && en.Volume == "ext-v1" && en.Result == "ok" && detached.IsZero() {
			detached = en.Time
		}
	}
	if unmounted.IsZero() || detached.Before(unmounted) {
		t.Fatalf("exp: w1's unmount (%s) before the storage detach (%s)", unmounted, detached)
	}
}
