package integration

import (
	"testing"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
)

// An agent's controller_calls reaches the servers with its controller
// fingerprint, and the plugin's limit is the smallest admitted setting
// (decision 57): real agents, real hostdir plugins, real Raft.
func TestClientCSI_ControllerCallsComeFromTheControllersPluginConfig(t *testing.T) {
	e := newCSIEnv(t)
	f1, f2 := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	for name, calls := range map[string]int{"ctrl1": 6, "ctrl2": 3} {
		p := harness.StartPlugin(t, name, hostdir.ModeController, e.root)
		e.plugins[name] = p
		cfg := p.Config()
		cfg.ControllerCalls = calls
		e.clients[name] = e.c.StartClient(name, e.c.ServerOrder(f2), cfg)
		e.clients[name].AdmitControllers()
	}
	e.waitPlugin(t, 1, 2)
	p, err := e.plugin(t, e.apis[e.leader.Name])
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"ctrl1": 6, "ctrl2": 3} {
		info := p.Controllers[e.nodeID(name)]
		if info == nil || info.ControllerCalls != want {
			t.Errorf("controller %s exp: controller_calls %d got: %+v", name, want, info)
		}
	}
	if got := p.ControllerCallLimit(); got != 3 {
		t.Errorf("plugin's limit exp: 3 (the smallest admitted setting) got: %d", got)
	}
}
