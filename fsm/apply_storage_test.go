package fsm

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

func storageRound(errMsg string, findings ...*structs.StorageFinding) *structs.StorageReportRequest {
	return &structs.StorageReportRequest{Report: &structs.StorageReport{PluginID: "p", CheckedAt: time.Unix(100, 0).UTC(),
		ControllerNodeID: "n1", Volumes: 2, Known: 1, Error: errMsg, Findings: findings}}
}

// A round's findings replace the last round's; a round that failed keeps
// them (and when they were made), so a controller outage hides nothing.
func TestStorageReport_FailedRoundKeepsTheLastFindings(t *testing.T) {
	h := mustNewHarness(t)
	orphan := &structs.StorageFinding{Kind: structs.FindingOrphan, VolumeID: "v1", ExternalID: "ext-v1", ExternalNodeID: "x9", FirstSeen: time.Unix(90, 0).UTC()}
	h.mustApply(structs.StorageReportRequestType, storageRound("", orphan))
	failed := storageRound("no controller of plugin \"p\" answered")
	failed.Report.CheckedAt = time.Unix(200, 0).UTC()
	h.mustApply(structs.StorageReportRequestType, failed)
	r, err := h.f.State().StorageReport(nil, "p")
	if err != nil || r == nil {
		t.Fatalf("report exp: kept got: %v %v", r, err)
	}
	if len(r.Findings) != 1 || r.Error == "" || !r.CheckedAt.Equal(time.Unix(100, 0)) || r.CreateIndex != 1 || r.ModifyIndex != 2 {
		t.Fatalf("after a failed round exp: the orphan from the round at 100 with the error got: %+v", r)
	}
	if got := r.ForVolume("v1"); len(got) != 1 || got[0].ExternalNodeID != "x9" {
		t.Fatalf("findings for v1 exp: the orphan got: %+v", got)
	}
	h.mustApply(structs.StorageReportRequestType, storageRound(""))
	if r, _ := h.f.State().StorageReport(nil, "p"); len(r.Findings) != 0 || r.Error != "" {
		t.Fatalf("a clean round exp: no findings got: %+v", r)
	}

	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(mustSnapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if all, _ := restored.State().StorageReports(nil); len(all) != 1 || all[0].PluginID != "p" {
		t.Fatalf("storage reports after restore exp: p got: %+v", all)
	}
}

func TestStorageReport_BadReportsRefused(t *testing.T) {
	h := mustNewHarness(t)
	h.mustRefuse(structs.StorageReportRequestType, &structs.StorageReportRequest{}, structs.CodeInvalid)
	h.mustRefuse(structs.StorageReportRequestType, &structs.StorageReportRequest{Report: &structs.StorageReport{PluginID: "../p"}}, structs.CodeInvalid)
	h.mustRefuse(structs.StorageReportRequestType, storageRound("", &structs.StorageFinding{Kind: "odd", ExternalID: "x"}), structs.CodeInvalid)
	h.mustRefuse(structs.StorageReportRequestType, storageRound("", &structs.StorageFinding{Kind: structs.FindingOrphan}), structs.CodeInvalid)
	many := storageRound("")
	for i := 0; i <= structs.MaxStorageFindings; i++ {
		many.Report.Findings = append(many.Report.Findings, &structs.StorageFinding{Kind: structs.FindingUnknownVolume, ExternalID: "x"})
	}
	h.mustRefuse(structs.StorageReportRequestType, many, structs.CodeInvalid)
}

// A repair lands on its volume's short history (bounded), and a register
// keeps the servers' history and never takes one from the spec.
func TestStorageReport_RepairsRecordedOnTheVolumeAndKeptOnRegister(t *testing.T) {
	h := mustNewHarness(t)
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	for i := 0; i < structs.MaxReleasedClaims+2; i++ {
		req := storageRound("")
		req.Repairs = []*structs.VolumeRepair{{VolumeID: "v1", Repair: &structs.StorageRepair{
			At: time.Unix(int64(1000+i), 0).UTC(), ExternalNodeID: "x9"}}, {VolumeID: "gone", Repair: &structs.StorageRepair{}}}
		h.mustApply(structs.StorageReportRequestType, req)
	}
	v := h.volume("v1")
	if len(v.Repairs) != structs.MaxReleasedClaims || !v.Repairs[len(v.Repairs)-1].At.Equal(time.Unix(int64(1000+structs.MaxReleasedClaims+1), 0)) {
		t.Fatalf("repairs exp: the last %d, newest last got: %+v", structs.MaxReleasedClaims, v.Repairs)
	}
	spec := testVolume("v1", structs.AccessModeSingleNodeWriter)
	spec.Repairs = []*structs.StorageRepair{{ExternalNodeID: "forged"}}
	spec.Released = []*structs.Claim{{AllocID: "forged"}}
	h.registerVolumes(spec)
	v = h.volume("v1")
	if len(v.Repairs) != structs.MaxReleasedClaims || v.Repairs[0].ExternalNodeID != "x9" || len(v.Released) != 0 {
		t.Fatalf("register exp: the servers' history kept, the spec's ignored got: repairs %+v released %+v", v.Repairs, v.Released)
	}
	h.mustRefuse(structs.StorageReportRequestType, &structs.StorageReportRequest{Report: storageRound("").Report,
		Repairs: []*structs.VolumeRepair{{VolumeID: "v1"}}}, structs.CodeInvalid)
}
