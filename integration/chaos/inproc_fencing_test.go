package chaos

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/integration/harness"
)

// TestChaos_InProcessFencing runs the fencing nemeses (fencing_test.go)
// where the in-process backend allows: real writer processes (and
// `claimd exec` or `claimd keeper` when the built claimd has them) and
// in-process agents, which can be stopped and started (a crash is a
// shutdown that leaves the mounts) but not frozen, so the SIGSTOP
// nemesis is netns only. It needs no root.
func TestChaos_InProcessFencing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in the chaos step (scripts/test.sh) without -short")
	}
	tool := fwTool(t)
	h := newFenceHook(t)
	ip := NewInProcess(t, InProcessOptions{HeartbeatTTL: 2 * time.Second, Agent: func(name string, cfg *client.Config) {
		if name == "w1" || name == "w2" {
			cfg.NodeLease, cfg.FenceCommand = fcLease, h.command()
		}
	}}).(*inProcess)
	admin := ip.Client(ip.Servers()[0])
	t.Cleanup(func() { admin.Close() })
	fcRunAll(t, &fcInproc{ip: ip, client: admin}, h, tool)
}

// fcInproc is the in-process backend for the fencing nemeses.
type fcInproc struct {
	ip     *inProcess
	client *api.Client
}

func (f *fcInproc) admin() *api.Client { return f.client }
func (f *fcInproc) nodes() (fcNode, fcNode) {
	return &fcIpNode{ip: f.ip, n: f.ip.workers[0].Name, nodeID: f.ip.workers[0].NodeID},
		&fcIpNode{ip: f.ip, n: f.ip.workers[1].Name, nodeID: f.ip.workers[1].NodeID}
}
func (f *fcInproc) isolate(n fcNode) error { return f.ip.IsolateWorker(n.name()) }
func (f *fcInproc) heal() error            { return f.ip.Heal() }
func (f *fcInproc) command(_ fcNode, argv []string) *exec.Cmd {
	return exec.Command(argv[0], argv[1:]...)
}
func (f *fcInproc) logDir() string             { return f.ip.logDir }
func (f *fcInproc) claimd(t *testing.T) string { return harness.Binary(t) }
func (f *fcInproc) keep(_ string, cmd *exec.Cmd) {
	f.ip.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
}

// fcIpNode is one in-process agent.
type fcIpNode struct {
	ip     *inProcess
	n      string
	nodeID string
}

func (n *fcIpNode) name() string    { return n.n }
func (n *fcIpNode) id() string      { return n.nodeID }
func (n *fcIpNode) dataDir() string { return n.ip.AgentDataDir(n.n) }
func (n *fcIpNode) crash() error    { return n.ip.StopAgent(n.n) }
func (n *fcIpNode) stop() error     { return n.ip.StopAgent(n.n) }
func (n *fcIpNode) start() error    { return n.ip.StartAgent(n.n) }
func (n *fcIpNode) ready() bool {
	a := n.ip.Agent(n.n)
	return a != nil && a.Health().ServerSession
}
func (n *fcIpNode) running() bool  { return n.ip.Agent(n.n) != nil }
func (n *fcIpNode) canPause() bool { return false }
func (n *fcIpNode) pause() error   { return nil }
func (n *fcIpNode) resume() error  { return nil }
func (n *fcIpNode) paused() bool   { return false }
