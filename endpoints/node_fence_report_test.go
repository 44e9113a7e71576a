package endpoints

import (
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// A registration that brings a fence report records it on the volumes it
// names (issue 39), with the report's text sanitised as the node's own:
// a failed fence of v1 by n1 is on v1, hostile bytes made printable.
func TestNodeRegister_FenceReportGoesOnTheVolume(t *testing.T) {
	w := newWorld(t, true)
	node, _ := w.node(tlsutil.RoleClient)
	req := regNode("n1", "s-n1", "")
	req.Node.LastFence = &structs.FenceReport{At: time.Now(), Volumes: []*structs.FencedVolume{{
		AllocID: "a1", VolumeID: "v1", HookOK: false, Unmounted: true, Error: "exit 1: \x1b[2Jgone"}}}
	orig := req.Node
	if err := node.Register(req, &structs.NodeUpdateResponse{}); err != nil {
		t.Fatal(err)
	}
	v, _ := w.state.State().VolumeByID(nil, "v1")
	if len(v.FenceFailures) != 1 || v.FenceFailures[0].NodeID != "n1" || v.FenceFailures[0].HookOK {
		t.Fatalf("v1 exp: n1's failed fence recorded got: %+v", v.FenceFailures)
	}
	if e := v.FenceFailures[0].Error; strings.ContainsRune(e, '\x1b') || !strings.Contains(e, "gone") {
		t.Fatalf("recorded error exp: sanitised got: %q", e)
	}
	if !strings.ContainsRune(orig.LastFence.Volumes[0].Error, '\x1b') {
		t.Fatal("the caller's report exp: untouched (a sanitised copy is recorded) got: changed in place")
	}
	// A registration without a report leaves it.
	if err := node.Register(regNode("n1", "s-n1", ""), &structs.NodeUpdateResponse{}); err != nil {
		t.Fatal(err)
	}
	if v, _ := w.state.State().VolumeByID(nil, "v1"); len(v.FenceFailures) != 1 {
		t.Fatalf("v1 after a registration without a report exp: failure kept got: %+v", v.FenceFailures)
	}
}
