package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// volume status shows each release's steps with index and time, for a
// claim being released and a freed one.
func TestPrintVolume_ReleaseTimelines(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	v := &structs.Volume{ID: "v1", PluginID: "hostdir",
		PastClaims: map[string]*structs.Claim{"a2": {AllocID: "a2", NodeID: "n1", State: structs.ClaimStateUnpublishing,
			Steps: []structs.ClaimStep{{State: structs.ClaimStateTaken, Index: 7}, {State: structs.ClaimStateUnpublishing, Index: 9, Time: at}}}},
		Released: []*structs.Claim{{AllocID: "a1", NodeID: "n1", State: structs.ClaimStateFreed,
			Steps: []structs.ClaimStep{{State: structs.ClaimStateFreed, Index: 5, Time: at}}}},
	}
	var buf bytes.Buffer
	printVolume(&buf, v, nil)
	out := buf.String()
	if !strings.Contains(out, "Release Timelines") {
		t.Fatalf("volume status exp: a Release Timelines section got:\n%s", out)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{"a2 n1 taken 7 - -", "a2 n1 unpublishing 9 2026-12-04T10:00:00Z -", "a1 n1 freed 5 2026-12-04T10:00:00Z node-detach"} {
		if !lines[want] {
			t.Errorf("volume status exp: a line %q got:\n%s", want, out)
		}
	}
	buf.Reset()
	printVolume(&buf, &structs.Volume{ID: "v2"}, nil)
	if strings.Contains(buf.String(), "Release Timelines") {
		t.Fatalf("a volume without releases exp: no timeline section got:\n%s", buf.String())
	}
}

// A fenced release shows its path and when the lease ran out, in the
// claims table and the timeline.
func TestPrintVolume_FencedReleaseShowsThePathAndTheLease(t *testing.T) {
	ranOut := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := ranOut.Add(time.Second)
	v := &structs.Volume{ID: "v1", PluginID: "hostdir", NodeLost: structs.NodeLostFence,
		PastClaims: map[string]*structs.Claim{"a1": {AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite,
			State: structs.ClaimStateNodeDetached, NodeLost: structs.NodeLostFence, Fenced: true, NodeDetachSkipped: true, LeaseExpiredAt: ranOut,
			Steps: []structs.ClaimStep{{State: structs.ClaimStateTaken, Index: 7, Time: at}, {State: structs.ClaimStateUnpublishing, Index: 9, Time: at},
				{State: structs.ClaimStateNodeDetached, Index: 12, Time: at}}}},
	}
	var buf bytes.Buffer
	printVolume(&buf, v, nil)
	lines := map[string]bool{}
	for _, l := range strings.Split(buf.String(), "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{
		"Node Lost = fence",
		"a1 n1 past write node-detached fence node fenced: lease ran out 2026-12-04T10:00:00Z",
		"a1 n1 lease-ran-out - 2026-12-04T10:00:00Z fenced",
		"a1 n1 node-detached 12 2026-12-04T10:00:01Z fenced",
	} {
		if !lines[want] {
			t.Errorf("volume status exp: a line %q got:\n%s", want, buf.String())
		}
	}
}

// An orphan reconciliation detached shows in the timeline: found, then
// detached, by the reconcile path.
func TestPrintVolume_OrphanRepairInTheTimeline(t *testing.T) {
	found := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	v := &structs.Volume{ID: "v1", PluginID: "hostdir", Repairs: []*structs.StorageRepair{
		{FirstSeen: found, At: found.Add(10 * time.Minute), ExternalNodeID: "ext-w9"}}}
	var buf bytes.Buffer
	printVolume(&buf, v, nil)
	lines := map[string]bool{}
	for _, l := range strings.Split(buf.String(), "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{"- ext-w9 orphan-found - 2026-12-05T09:00:00Z reconcile", "- ext-w9 orphan-detached - 2026-12-05T09:10:00Z reconcile"} {
		if !lines[want] {
			t.Errorf("volume status exp: a line %q got:\n%s", want, buf.String())
		}
	}
}

// The findings table says what each disagreement means.
func TestPrintStorageReport(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	r := &structs.StorageReport{PluginID: "hostdir", CheckedAt: at, ControllerNodeID: "c1", Volumes: 3, Known: 2, Findings: []*structs.StorageFinding{
		{Kind: structs.FindingOrphan, VolumeID: "v1", ExternalID: "ext-v1", ExternalNodeID: "ext-w9", FirstSeen: at},
		{Kind: structs.FindingMissing, VolumeID: "v2", ExternalID: "ext-v2", NodeID: "n1", AllocID: "a1", FirstSeen: at},
		{Kind: structs.FindingUnknownVolume, ExternalID: "stray", FirstSeen: at}}}
	var buf bytes.Buffer
	printStorageReport(&buf, r, "")
	out := buf.String()
	for _, want := range []string{"Plugin hostdir: checked 2026-12-05T09:00:00Z through the controller on node c1; the storage lists 3 volumes, 2 of them known here",
		"attached on the storage; no claim explains it", "claim recorded as attached; the storage does not show it", "not registered here (left alone)"} {
		if !strings.Contains(out, want) {
			t.Errorf("report exp: %q got:\n%s", want, out)
		}
	}
	buf.Reset()
	printStorageReport(&buf, r, "v3")
	if !strings.Contains(buf.String(), "The storage agrees with the record") {
		t.Fatalf("report for a volume without findings exp: agrees got:\n%s", buf.String())
	}
}
