package structs

import (
	"strings"
	"testing"
)

func TestNode_ValidateAndSanitize(t *testing.T) {
	n := &Node{ID: "n1", SecretID: "s", CSINodePlugins: map[string]*CSIInfo{"p": {PluginID: "p", Healthy: true}}}
	if err := n.Validate(); err != nil {
		t.Fatalf("exp: valid got: %v", err)
	}
	for field, mut := range map[string]func(n *Node){
		"secret_id":                    func(n *Node) { n.SecretID = "" },
		"status":                       func(n *Node) { n.Status = "sleepy" },
		"csi_node_plugins.p.plugin_id": func(n *Node) { n.CSINodePlugins["p"].PluginID = "q" },
	} {
		c := n.Copy()
		mut(c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field+":") {
			t.Fatalf("%s: exp: invalid naming it got: %v", field, err)
		}
	}
	if s := n.Sanitize(); s.SecretID == "s" || n.SecretID != "s" {
		t.Fatalf("exp: sanitized copy without secret, original kept got: %q %q", s.SecretID, n.SecretID)
	}
}

func TestPlugin_Schedulable(t *testing.T) {
	p := &Plugin{ID: "p", Nodes: map[string]*CSIInfo{"n1": {Healthy: true}, "n2": {Healthy: false}}}
	if ok, why := p.Schedulable("n1"); !ok {
		t.Fatalf("n1: exp: schedulable got: %s", why)
	}
	if ok, _ := p.Schedulable("n2"); ok {
		t.Fatalf("n2: exp: unhealthy node plugin refused got: ok")
	}
	p.ControllerRequired = true
	if ok, _ := p.Schedulable("n1"); ok {
		t.Fatalf("exp: no healthy controller refused got: ok")
	}
	var none *Plugin
	if ok, _ := none.Schedulable("n1"); ok {
		t.Fatalf("exp: missing plugin refused got: ok")
	}
}

func TestAlloc_Validate(t *testing.T) {
	a := &Alloc{ID: "a1", NodeID: "n1", Volumes: []*AllocVolumeRequest{{VolumeID: "v1"}, {VolumeID: "v1"}}}
	if err := a.Validate(); err == nil || !strings.Contains(err.Error(), "volumes[1].volume_id:") {
		t.Fatalf("exp: duplicate volume named got: %v", err)
	}
	c := a.Copy()
	c.Volumes[0].ReadOnly = true
	if a.Volumes[0].ReadOnly {
		t.Fatalf("exp: deep copy got: shared request")
	}
}
