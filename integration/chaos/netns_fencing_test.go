package chaos

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
)

// TestChaos_NetnsFencing runs the fencing nemeses (fencing_test.go) on
// real processes in network namespaces: every agent fault there is one
// (kill -9, SIGSTOP, SIGTERM). -chaos.fence-launcher picks what ties the
// writers to the lease (auto: `claimd exec` when the built claimd has
// it). About four to six minutes.
func TestChaos_NetnsFencing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in the chaos step (scripts/test.sh) without -short")
	}
	tool := fwTool(t)
	h := newFenceHook(t)
	opts := nsTestOptions()
	opts.WorkerArgs = map[string][]string{"w1": fcAgentArgs(h), "w2": fcAgentArgs(h)}
	c := NewNetns(t, opts).(*netnsCluster)
	fcRunAll(t, &fcNetns{c: c, client: c.Client("s1")}, h, tool)
	nsCheckSecured(t, c)
}

// fcNetns is the netns backend for the fencing nemeses.
type fcNetns struct {
	c      *netnsCluster
	client *api.Client

	mu   sync.Mutex
	kept []*exec.Cmd
}

func (f *fcNetns) admin() *api.Client { return f.client }
func (f *fcNetns) nodes() (fcNode, fcNode) {
	return &fcNsNode{c: f.c, w: f.c.workers[0]}, &fcNsNode{c: f.c, w: f.c.workers[1]}
}
func (f *fcNetns) isolate(n fcNode) error { return f.c.IsolateWorker(n.name()) }
func (f *fcNetns) heal() error            { return f.c.Heal() }
func (f *fcNetns) command(n fcNode, argv []string) *exec.Cmd {
	return f.c.lab.Exec(n.name(), argv[0], argv[1:]...)
}
func (f *fcNetns) logDir() string           { return f.c.logDir }
func (f *fcNetns) claimd(*testing.T) string { return f.c.bin }

// keep: killed before the lab's namespaces go (the backend's shutdown
// kills only its own processes; the lab's cleanup would get these too).
func (f *fcNetns) keep(name string, cmd *exec.Cmd) {
	f.c.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// fcNsNode is one worker's agent process.
type fcNsNode struct {
	c *netnsCluster
	w *nsWorker
	// readyBefore counts "claimd client running" lines before the last
	// start.
	readyBefore int
}

func (n *fcNsNode) name() string    { return n.w.name }
func (n *fcNsNode) id() string      { return n.w.nodeID }
func (n *fcNsNode) dataDir() string { return filepath.Join(n.c.dataDir, n.w.name) }
func (n *fcNsNode) crash() error    { return n.w.agent.kill() }
func (n *fcNsNode) stop() error     { return n.w.agent.terminate(30 * time.Second) }
func (n *fcNsNode) start() error {
	n.readyBefore = nsCountInLog(n.w.agent, "claimd client running")
	return n.w.agent.start()
}
func (n *fcNsNode) ready() bool {
	return nsCountInLog(n.w.agent, "claimd client running") > n.readyBefore
}
func (n *fcNsNode) running() bool  { return !n.w.agent.exited() }
func (n *fcNsNode) canPause() bool { return true }
func (n *fcNsNode) pause() error   { return n.w.agent.pause() }
func (n *fcNsNode) resume() error  { return n.w.agent.resume() }
func (n *fcNsNode) paused() bool   { return n.w.agent.isPaused() }

// terminate stops the process gracefully (SIGTERM, as `systemctl stop`
// does) and waits until it is reaped.
func (p *nsProc) terminate(wait time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	running := p.running()
	p.want, p.paused = false, false
	p.mu.Unlock()
	if !running {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		return &os.SyscallError{Syscall: "netns: " + p.name + " not stopped after SIGTERM within " + wait.String(), Err: syscall.ETIMEDOUT}
	}
}

// isPaused reports whether the backend stopped the process with SIGSTOP.
func (p *nsProc) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// nsCountInLog counts a string in a process's log (all its starts).
func nsCountInLog(p *nsProc, s string) int {
	b, _ := os.ReadFile(p.logPath)
	return strings.Count(string(b), s)
}
