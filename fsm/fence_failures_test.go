package fsm

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// Fence failures (issue 39): recorded on the volume from the node's
// registration, kept until the node says the fence went through or is
// deregistered, the same on every replica.

var fenceAt = time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)

func reportNode(id string, vols ...*structs.FencedVolume) *structs.FenceReportRequest {
	return &structs.FenceReportRequest{NodeID: id, Report: &structs.FenceReport{At: fenceAt, LeaseRemaining: time.Second, Volumes: vols}}
}

func hookFailed(alloc, vol string) *structs.FencedVolume {
	return &structs.FencedVolume{AllocID: alloc, VolumeID: vol, HookOK: false, Unmounted: true,
		Error: "fence command: exit status 1: cannot reach the workload", Done: fenceAt.Add(time.Second)}
}

func fenceOK(alloc, vol string) *structs.FencedVolume {
	return &structs.FencedVolume{AllocID: alloc, VolumeID: vol, HookOK: true, Unmounted: true, Done: fenceAt.Add(2 * time.Second)}
}

func failuresOf(h *harness, vol string) string {
	var out []string
	for _, f := range h.volume(vol).FenceFailures {
		out = append(out, f.NodeID+"/"+f.AllocID)
	}
	return fmt.Sprint(out)
}

func TestFenceFailure_RecordedFromTheReportUntilTheNodeSaysItIsDone(t *testing.T) {
	h := newFenceHarness(t, structs.NodeLostFence)
	h.registerVolumes(testVolume("v2", structs.AccessModeSingleNodeWriter))
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", hookFailed("a1", "v1"), fenceOK("a9", "v2"), hookFailed("a8", "gone")))
	v := h.volume("v1")
	if len(v.FenceFailures) != 1 || v.Health() != structs.VolumeAbnormal {
		t.Fatalf("v1 exp: one fence failure, abnormal got: %+v (%s)", v.FenceFailures, v.Health())
	}
	f := v.FenceFailures[0]
	if f.NodeID != "n1" || f.AllocID != "a1" || f.HookOK || !f.FencedAt.Equal(fenceAt) || f.ReportIndex != h.index ||
		f.Warning() != "may still be written on node n1 (alloc a1): fence command failed: fence command: exit status 1: cannot reach the workload" {
		t.Fatalf("failure exp: n1/a1 hook failed, from the report got: %+v %q", f, f.Warning())
	}
	if v2 := h.volume("v2"); len(v2.FenceFailures) != 0 || v2.Health() != structs.VolumeHealthy {
		t.Fatalf("v2 fenced fine exp: healthy got: %+v", v2.FenceFailures)
	}
	if vols, _ := h.f.State().VolumesWithFenceFailures(nil); len(vols) != 1 || vols[0].ID != "v1" {
		t.Fatalf("index exp: v1 only got: %v", vols)
	}

	// The agent sends the same report again (it was not acknowledged):
	// nothing is written, the first index stays.
	modified := h.volume("v1").ModifyIndex
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", hookFailed("a1", "v1")))
	if v := h.volume("v1"); v.ModifyIndex != modified || v.FenceFailures[0].ReportIndex != f.ReportIndex {
		t.Fatalf("same report again exp: no write got: modify %d→%d %+v", modified, v.ModifyIndex, v.FenceFailures[0])
	}
	// A registration without a report changes nothing either.
	h.mustApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1")})
	if got := failuresOf(h, "v1"); got != "[n1/a1]" {
		t.Fatalf("registration without a report exp: failure kept got: %s", got)
	}
	// A later attempt failed otherwise: the entry is replaced.
	unmount := &structs.FencedVolume{AllocID: "a1", VolumeID: "v1", HookOK: true, Unmounted: false, Error: "unpublish: device busy"}
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", unmount))
	if f := h.volume("v1").FenceFailures; len(f) != 1 || !f[0].HookOK || !strings.HasSuffix(f[0].Warning(), "unmount failed: unpublish: device busy") {
		t.Fatalf("second failure exp: replaces the first got: %+v", f)
	}
	// Another node's word on its own claim does not clear n1's.
	h.registerNode(testNode("n2"))
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n2", fenceOK("a1", "v1")))
	if got := failuresOf(h, "v1"); got != "[n1/a1]" {
		t.Fatalf("other node's report exp: n1's failure kept got: %s", got)
	}
	// The node says the fence went through: cleared.
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", fenceOK("a1", "v1")))
	if v := h.volume("v1"); len(v.FenceFailures) != 0 || v.FenceFailures != nil || v.Health() != structs.VolumeHealthy {
		t.Fatalf("fence done exp: no failure, healthy got: %+v", v.FenceFailures)
	}
	if vols, _ := h.f.State().VolumesWithFenceFailures(nil); len(vols) != 0 {
		t.Fatalf("index exp: empty got: %v", vols)
	}
}

func TestFenceFailure_RecordedAfterTheReleaseAndClearedByDeregistration(t *testing.T) {
	h := newFenceHarness(t, structs.NodeLostFence)
	// The servers fenced the claim and freed it; the node reports later
	// that it could not unmount.
	h.markDown("n1")
	h.checkpoint(fenced(structs.ClaimStateFreed))
	if v := h.volume("v1"); v.HasClaims() {
		t.Fatalf("exp: claim freed got: %+v", v.PastClaims)
	}
	fail := &structs.FencedVolume{AllocID: "a1", VolumeID: "v1", HookOK: true, Unmounted: false, Error: "unpublish: busy"}
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", fail))
	if got := failuresOf(h, "v1"); got != "[n1/a1]" {
		t.Fatalf("report after the release exp: recorded got: %s", got)
	}
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	if v := h.volume("v1"); v.FenceFailures != nil {
		t.Fatalf("deregistered node exp: its failures cleared got: %+v", v.FenceFailures)
	}
}

func TestFenceFailure_BoundedToTheNewest(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter))
	for i := range structs.MaxFenceFailures + 3 {
		h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", hookFailed(fmt.Sprintf("a%02d", i), "v1")))
	}
	fs := h.volume("v1").FenceFailures
	if len(fs) != structs.MaxFenceFailures || fs[0].AllocID != "a03" || fs[len(fs)-1].AllocID != fmt.Sprintf("a%02d", structs.MaxFenceFailures+2) {
		t.Fatalf("exp: the %d newest, sorted got: %d from %s", structs.MaxFenceFailures, len(fs), fs[0].AllocID)
	}
}

// Replicas that apply the same entries hold the same bytes, and a
// snapshot restores the failures and their index.
func TestFenceFailure_SameOnEveryReplicaAndThroughASnapshot(t *testing.T) {
	h := newFenceHarness(t, structs.NodeLostFence)
	h.registerNode(testNode("n2"))
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n2", hookFailed("b2", "v1"), hookFailed("b1", "v1")))
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", hookFailed("a1", "v1")))
	if got := failuresOf(h, "v1"); got != "[n1/a1 n2/b1 n2/b2]" {
		t.Fatalf("order exp: by node then alloc got: %s", got)
	}
	replica := mustNewHarness(t)
	for i, data := range h.log {
		replica.f.apply(uint64(i+1), data)
	}
	snap := mustSnapshotBytes(t, h.f)
	if !bytes.Equal(snap, mustSnapshotBytes(t, replica.f)) {
		t.Fatal("replicas exp: same bytes got: different")
	}
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	vols, err := restored.State().VolumesWithFenceFailures(nil)
	if err != nil || len(vols) != 1 || len(vols[0].FenceFailures) != 3 {
		t.Fatalf("restored exp: v1 with 3 failures, indexed got: %v %v", vols, err)
	}
}

// A report names a registered node and a valid report; anything else is
// refused and changes nothing.
func TestFenceFailure_ReportRefusals(t *testing.T) {
	h := newFenceHarness(t, structs.NodeLostFence)
	typ := structs.FenceReportRequestType | structs.IgnoreUnknownTypeFlag
	if err := h.mustRefuse(typ, reportNode("nobody", hookFailed("a1", "v1")), structs.CodeNotFound); !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("unknown node exp: refusal naming it got: %v", err)
	}
	if err := h.mustRefuse(typ, &structs.FenceReportRequest{NodeID: "n1"}, structs.CodeInvalid); !strings.Contains(err.Error(), "report") {
		t.Fatalf("no report exp: refusal naming report got: %v", err)
	}
	bad := reportNode("n1", &structs.FencedVolume{AllocID: "a1", VolumeID: ""})
	if err := h.mustRefuse(typ, bad, structs.CodeInvalid); !strings.Contains(err.Error(), "last_fence.volumes[0].volume_id") {
		t.Fatalf("bad volume ID exp: refusal naming the field got: %v", err)
	}
	// A registration that carries a report records nothing on the volume
	// by itself: the leader writes the report entry after it.
	n := testNode("n1")
	n.LastFence = reportNode("n1", hookFailed("a1", "v1")).Report
	h.mustApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n})
	if v := h.volume("v1"); v.FenceFailures != nil {
		t.Fatalf("registration alone exp: nothing on the volume got: %+v", v.FenceFailures)
	}
}

// Fence failures are the nodes' word: a register request cannot set or
// clear them, and re-registering the volume keeps them.
func TestFenceFailure_RegisterCannotSetOrClearThem(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	forged := testVolume("v1", structs.AccessModeSingleNodeWriter)
	forged.FenceFailures = []*structs.FenceFailure{{NodeID: "n1", AllocID: "x", Error: "forged"}}
	h.registerVolumes(forged)
	if v := h.volume("v1"); v.FenceFailures != nil {
		t.Fatalf("register with fence_failures exp: ignored got: %+v", v.FenceFailures)
	}
	h.mustApply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, reportNode("n1", hookFailed("a1", "v1")))
	again := testVolume("v1", structs.AccessModeSingleNodeWriter)
	again.Parameters = map[string]string{"changed": "yes"}
	h.registerVolumes(again)
	if got := failuresOf(h, "v1"); got != "[n1/a1]" {
		t.Fatalf("re-registered volume exp: failure kept got: %s", got)
	}
	if vols, _ := h.f.State().VolumesWithFenceFailures(nil); len(vols) != 1 {
		t.Fatalf("index after re-registration exp: v1 got: %v", vols)
	}
}

// A node speaks only of its own allocations: a line about another node's
// allocation, or about a volume the allocation never asked for, is
// skipped; an allocation the state no longer knows is taken on its word.
func TestFenceFailure_ANodeReportsOnlyItsOwnClaims(t *testing.T) {
	h := newFenceHarness(t, structs.NodeLostFence) // a1 on n1 claims v1
	h.registerNode(testNode("n2"))
	h.registerVolumes(testVolume("v2", structs.AccessModeSingleNodeWriter))
	typ := structs.FenceReportRequestType | structs.IgnoreUnknownTypeFlag
	h.mustApply(typ, reportNode("n2", hookFailed("a1", "v1")))
	h.mustApply(typ, reportNode("n1", hookFailed("a1", "v2")))
	if a, b := failuresOf(h, "v1"), failuresOf(h, "v2"); a != "[]" || b != "[]" {
		t.Fatalf("foreign or unclaimed lines exp: skipped got: v1 %s v2 %s", a, b)
	}
	h.mustApply(typ, reportNode("n2", hookFailed("collected", "v1")))
	h.mustApply(typ, reportNode("n1", hookFailed("a1", "v1")))
	if got := failuresOf(h, "v1"); got != "[n1/a1 n2/collected]" {
		t.Fatalf("own and unknown allocations exp: recorded got: %s", got)
	}
	// n2 cannot clear n1's word on n1's allocation.
	h.mustApply(typ, reportNode("n2", fenceOK("a1", "v1")))
	if got := failuresOf(h, "v1"); got != "[n1/a1 n2/collected]" {
		t.Fatalf("another node's all-clear exp: ignored got: %s", got)
	}
}
