package structs

import (
	"strings"
	"testing"
)

func TestVolume_TopologyAllows(t *testing.T) {
	v := &Volume{AccessibleTopology: []map[string]string{{"zone": "a"}, {"zone": "b", "rack": "1"}}}
	for _, c := range []struct {
		node map[string]string
		want bool
	}{
		{map[string]string{"zone": "a"}, true},
		{map[string]string{"zone": "a", "rack": "9"}, true}, // extra node segments do not matter
		{map[string]string{"zone": "b", "rack": "1"}, true},
		{map[string]string{"zone": "b"}, false}, // every segment of an entry must match
		{map[string]string{"zone": "c"}, false},
		{nil, false},
	} {
		if got := v.TopologyAllows(c.node); got != c.want {
			t.Fatalf("%v: exp: %t got: %t", c.node, c.want, got)
		}
	}
	if !(&Volume{}).TopologyAllows(nil) {
		t.Fatalf("exp: a volume without topology is reachable everywhere got: refused")
	}
	if got := v.TopologyText(); got != "[zone=a] [rack=1,zone=b]" {
		t.Fatalf("exp: [zone=a] [rack=1,zone=b] got: %s", got)
	}
}

func TestVolume_ValidateTopologyNamesField(t *testing.T) {
	for field, topo := range map[string][]map[string]string{
		"accessible_topology[1]":      {{"zone": "a"}, {}},
		"accessible_topology[0]":      {{"": "a"}},
		"accessible_topology[0].zone": {{"zone": strings.Repeat("x", 5000)}},
		"accessible_topology":         make([]map[string]string, 65),
	} {
		v := validVolume()
		v.AccessibleTopology = topo
		if err := v.Validate(); err == nil || !strings.HasPrefix(err.Error(), "invalid: "+field+":") {
			t.Fatalf("%s: exp: invalid naming it got: %v", field, err)
		}
	}
	v := validVolume()
	v.AccessibleTopology = []map[string]string{{"zone": "a"}}
	if err := v.Validate(); err != nil {
		t.Fatalf("exp: valid got: %v", err)
	}
	c := v.Copy()
	c.AccessibleTopology[0]["zone"] = "changed"
	if v.AccessibleTopology[0]["zone"] != "a" {
		t.Fatalf("exp: copy is deep got: original %v", v.AccessibleTopology)
	}
}

func TestNode_ValidateFingerprintTopologyAndCopy(t *testing.T) {
	n := &Node{ID: "n1", SecretID: "s", CSINodePlugins: map[string]*CSIInfo{"p": {PluginID: "p", Healthy: true,
		MaxVolumes: 2, AccessibleTopology: map[string]string{"zone": "a"},
		NodeCapabilities: &CSINodeCapabilities{StageUnstageVolume: true}}}}
	if err := n.Validate(); err != nil {
		t.Fatalf("exp: valid got: %v", err)
	}
	c := n.Copy()
	c.CSINodePlugins["p"].AccessibleTopology["zone"] = "b"
	c.CSINodePlugins["p"].NodeCapabilities.StageUnstageVolume = false
	if p := n.CSINodePlugins["p"]; p.AccessibleTopology["zone"] != "a" || !p.NodeCapabilities.StageUnstageVolume {
		t.Fatalf("exp: copy is deep got: original %+v", p)
	}
	for field, mut := range map[string]func(i *CSIInfo){
		"csi_node_plugins.p.accessible_topology": func(i *CSIInfo) { i.AccessibleTopology = map[string]string{"": "x"} },
		"csi_node_plugins.p.max_volumes":         func(i *CSIInfo) { i.MaxVolumes = -1 },
	} {
		c := n.Copy()
		mut(c.CSINodePlugins["p"])
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field+":") {
			t.Fatalf("%s: exp: invalid naming it got: %v", field, err)
		}
	}
}
