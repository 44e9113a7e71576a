package main

import (
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

func TestCutAtWordKeepsIDsWhole(t *testing.T) {
	id := "90b7c2aa-1111-2222-3333-444455556666"
	msg := strings.Repeat("word ", 30) + "node detach: node " + id + " is down; waiting"
	got := cutAtWord(msg, 170)
	if strings.Contains(got, "90b7") && !strings.Contains(got, id) {
		t.Fatalf("cut inside the ID: %q", got)
	}
	if len(got) > 174 || !strings.HasSuffix(got, " ...") {
		t.Fatalf("cut: %q", got)
	}
	if cutAtWord("short", 170) != "short" {
		t.Fatal("a short message was changed")
	}
}

// A down node's plugins are not shown as healthy: it has not reported
// them since it went away.
func TestNodePluginHealthOfADownNodeIsUnknown(t *testing.T) {
	plugins := map[string]*structs.CSIInfo{"hostdir": {Healthy: true}}
	if got := nodePluginHealth(&structs.Node{Status: structs.NodeStatusDown}, plugins); got != "hostdir(unknown: node down)" {
		t.Fatalf("down node: %q", got)
	}
	if got := nodePluginHealth(&structs.Node{Status: structs.NodeStatusReady}, plugins); got != "hostdir(healthy)" {
		t.Fatalf("ready node: %q", got)
	}
}
