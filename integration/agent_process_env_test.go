package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// agentProcessEnv is a releaseEnv whose node w1 runs as a real claimd agent
// process (mutual TLS, its node secret, no token) with its hostdir plugin
// in this process, as do the waiting node w2 and a controller node: the
// setting of the tests that kill, pause or restart an agent.
type agentProcessEnv struct {
	*releaseEnv
	w1       *harness.Process
	w1Data   string
	w1Plugin *harness.TestPlugin
	w1Node   string
}

// newAgentProcessEnv is the environment over cluster c (started, with a
// leader) with its files under dir; startNodes starts the nodes.
func newAgentProcessEnv(c *harness.Cluster, dir string) *agentProcessEnv {
	return &agentProcessEnv{
		releaseEnv: &releaseEnv{c: c, root: filepath.Join(dir, "storage"),
			nodes: map[string]*harness.TestPlugin{}, clients: map[string]*harness.TestClient{}},
		w1Data: filepath.Join(dir, "w1"),
	}
}

// startNodes starts w1's plugin and agent process (with agentFlags after
// the common ones), waits for w1's node identity, then starts w2 and the
// controller node in process and waits until the servers see both node
// plugins and the controller healthy.
func (e *agentProcessEnv) startNodes(t *testing.T, agentFlags ...string) {
	t.Helper()
	c := e.c
	e.api = c.Servers[0].Client()
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.Addr)
	}
	e.w1Plugin = harness.StartPlugin(t, "w1", hostdir.ModeNode, e.root)
	e.nodes["w1"] = e.w1Plugin
	args := []string{"agent", "-client", "-servers", strings.Join(addrs, ","), "-data-dir", e.w1Data,
		"-node-name", "w1", "-csi-plugin", "id=hostdir,type=node,socket=unix://" + e.w1Plugin.Socket,
		"-plugin-probe-interval", "200ms", "-log-level", "debug", "-http-addr", "off",
		"-tls-ca-file", c.PKI().CAFile, "-tls-cert-file", c.PKI().CertFile[tlsutil.RoleClient], "-tls-key-file", c.PKI().KeyFile[tlsutil.RoleClient]}
	e.w1 = harness.StartProcess(t, "w1", append(args, agentFlags...)...)
	harness.WaitFor(t, 30*time.Second, func() error {
		var id struct{ ID string }
		b, err := os.ReadFile(filepath.Join(e.w1Data, "node-identity.json"))
		if err == nil {
			err = json.Unmarshal(b, &id)
		}
		if err != nil || id.ID == "" {
			return fmt.Errorf("w1 node identity exp: written got: %v", err)
		}
		e.w1Node = id.ID
		return nil
	})
	p := harness.StartPlugin(t, "w2", hostdir.ModeNode, e.root)
	e.nodes["w2"] = p
	e.clients["w2"] = c.StartClient("w2", []string{addrs[1], addrs[2], addrs[0]}, p.Config())
	e.controller = harness.StartPlugin(t, "ctrl", hostdir.ModeController, e.root)
	e.ctrlClient = c.StartClient("ctrl", []string{addrs[2], addrs[1], addrs[0]}, e.controller.Config())
	e.ctrlClient.AdmitControllers()
	waitHostdirHealthy(t, e.api, 2, 1)
}

// waitW1Down waits until the servers have marked w1 down (its heartbeats
// missed past the TTL).
func (e *agentProcessEnv) waitW1Down(t *testing.T) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), e.w1Node, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.Status != structs.NodeStatusDown {
			return fmt.Errorf("w1 exp: down got: %s", n.Status)
		}
		return nil
	})
}
