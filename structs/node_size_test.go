package structs

import (
	"errors"
	"fmt"
	"net/rpc"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A node as large as the limits allow passes; one step past any limit is
// refused naming the field.
func TestNode_ValidateSize(t *testing.T) {
	node := func() *Node {
		n := &Node{ID: "n", SecretID: "s", CSINodePlugins: map[string]*CSIInfo{}, CSIControllerPlugins: map[string]*CSIInfo{}}
		for i := range 4 {
			id := fmt.Sprintf("p%d", i)
			seg := map[string]string{}
			for j := range MaxFingerprintSegments {
				seg[fmt.Sprintf("topology.example.com/k%02d", j)] = strings.Repeat("v", 100)
			}
			n.CSINodePlugins[id] = &CSIInfo{PluginID: id, HealthDescription: strings.Repeat("h", MaxFingerprintText-10), ExternalNodeID: "ext",
				AccessibleTopology: seg}
		}
		return n
	}
	if err := node().ValidateSize(); err != nil {
		t.Fatalf("node within the limits exp: valid got: %v", err)
	}
	cases := map[string]func(n *Node){
		"csi_node_plugins": func(n *Node) {
			for i := range MaxNodePluginsPerKind {
				id := fmt.Sprintf("q%d", i)
				n.CSINodePlugins[id] = &CSIInfo{PluginID: id}
			}
		},
		"csi_node_plugins.p0: health_description": func(n *Node) { n.CSINodePlugins["p0"].Provider = strings.Repeat("x", 20) },
		"csi_node_plugins.p1.accessible_topology: has 17 segments": func(n *Node) {
			n.CSINodePlugins["p1"].AccessibleTopology["extra"] = "1"
		},
		"csi_node_plugins.p2.accessible_topology: segment": func(n *Node) {
			n.CSINodePlugins["p2"].AccessibleTopology["topology.example.com/k00"] = strings.Repeat("v", MaxFingerprintSegmentBytes)
		},
		"csi_node_plugins.p3.controller_calls: 257 is not between 0 and 256": func(n *Node) {
			n.CSINodePlugins["p3"].ControllerCalls = MaxControllerCalls + 1
		},
		"csi_node_plugins.p3.controller_calls: -1": func(n *Node) { n.CSINodePlugins["p3"].ControllerCalls = -1 },
		"the node's fingerprints": func(n *Node) {
			for i := range 8 {
				id := fmt.Sprintf("c%d", i)
				n.CSIControllerPlugins[id] = &CSIInfo{PluginID: id, HealthDescription: strings.Repeat("h", MaxFingerprintText)}
			}
		},
	}
	for want, edit := range cases {
		n := node()
		edit(n)
		err := n.ValidateSize()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s exp: invalid naming it got: %v", want, err)
		}
	}
}

// RetryLater's hint survives the trip through net/rpc as a string.
func TestRetryAfter(t *testing.T) {
	err := RetryLater("Volume.List: too many", 1500*time.Millisecond)
	wire := ParseError(rpc.ServerError(err.Error()))
	if d, ok := RetryAfter(wire); !ok || d != 1500*time.Millisecond {
		t.Fatalf("retry after exp: 1.5s got: %v %v (%v)", d, ok, wire)
	}
	if _, ok := RetryAfter(NewError(CodeUnavailable, "budget")); ok {
		t.Fatal("unavailable without a hint exp: no retry-after got: one")
	}
	if _, ok := RetryAfter(NewError(CodeInvalid, "x; retry after 1s")); ok {
		t.Fatal("invalid exp: no retry-after got: one")
	}
	if d, _ := RetryAfter(RetryLater("x", time.Hour)); d != time.Minute {
		t.Fatalf("retry after an hour exp: capped at a minute got: %v", d)
	}
}

func TestClipText(t *testing.T) {
	if got := ClipText("short", 10); got != "short" {
		t.Fatalf("short text exp: unchanged got: %q", got)
	}
	got := ClipText(strings.Repeat("é", 400), 512)
	if len(got) > 512 || !strings.HasSuffix(got, "...") || !utf8.ValidString(got) {
		t.Fatalf("clipped text exp: <= 512 valid bytes ending ... got: %d bytes %q", len(got), got[len(got)-8:])
	}
}
