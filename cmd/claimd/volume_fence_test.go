package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// A failed fence: the volume is abnormal and each failure is a WARNING
// line naming the node, the alloc and what failed; a volume without one
// says nothing about health.
func TestPrintVolume_FailedFenceWarns(t *testing.T) {
	at := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	v := &structs.Volume{ID: "v1", PluginID: "hostdir", FenceFailures: []*structs.FenceFailure{
		{NodeID: "n1", AllocID: "a1", HookOK: false, Unmounted: true, Error: "exit status 1", FencedAt: at, ReportIndex: 40},
		{NodeID: "n2", AllocID: "a2", HookOK: true, Unmounted: false, Error: "unpublish: busy", FencedAt: at, ReportIndex: 41},
	}}
	var buf bytes.Buffer
	printVolume(&buf, v, nil)
	out := buf.String()
	for _, want := range []string{
		"= abnormal (a node reported that its fence of this volume failed)",
		"WARNING: volume v1 may still be written on node n1 (alloc a1): fence command failed: exit status 1 (fence started 2026-12-06T22:00:00Z, reported at index 40)",
		"WARNING: volume v1 may still be written on node n2 (alloc a2): unmount failed: unpublish: busy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("volume status exp: %q got:\n%s", want, out)
		}
	}
	buf.Reset()
	printVolume(&buf, &structs.Volume{ID: "v2"}, nil)
	if strings.Contains(buf.String(), "Health") || strings.Contains(buf.String(), "WARNING") {
		t.Fatalf("healthy volume exp: no health line, no warning got:\n%s", buf.String())
	}
}
