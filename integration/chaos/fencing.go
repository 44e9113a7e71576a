package chaos

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
)

// The parts of the fencing nemeses (issue 39; TestChaos_NetnsFencing and
// TestChaos_InProcessFencing, fencing_test.go): the writer program, the
// fence command the agents run, how a writer is tied to its node's lease
// (fwLauncher), and what the nemeses need from a backend (fcBackend).
// See doc.go "Fencing".

// fcBackend is what the fencing nemeses need from a cluster backend.
type fcBackend interface {
	// admin is an operator's API client (closed by the backend).
	admin() *api.Client
	// nodes are the two client nodes: A, which the faults hit, and B.
	nodes() (a, b fcNode)
	isolate(n fcNode) error
	heal() error
	// command prepares argv to run on n's host (in its network namespace
	// where it has one), not started.
	command(n fcNode, argv []string) *exec.Cmd
	// logDir keeps the writers' logs with the cluster's.
	logDir() string
	// claimd is the claimd binary, for `claimd exec` and `claimd keeper`.
	claimd(t *testing.T) string
	// keep makes the backend stop cmd, started, when the test ends.
	keep(name string, cmd *exec.Cmd)
}

// fcNode is one client node's agent.
type fcNode interface {
	name() string
	id() string
	// dataDir is the agent's data dir (held claims, the lease file).
	dataDir() string
	// crash stops the agent as a crash does: no unmount, no goodbye.
	crash() error
	// stop stops it gracefully (SIGTERM, `systemctl stop`).
	stop() error
	// start runs it again on its data dir; ready reports whether it says
	// it runs (reached the servers) since the last start.
	start() error
	ready() bool
	running() bool
	// pause and resume freeze and thaw it (SIGSTOP, SIGCONT), where
	// canPause says the backend can.
	canPause() bool
	pause() error
	resume() error
	paused() bool
}

// flagFenceLauncher picks how the fencing nemeses run their writers.
var flagFenceLauncher = flag.String("chaos.fence-launcher", "auto",
	"how TestChaos_NetnsFencing ties its writers to the node lease: hook (the agent's fence command kills the writer by pid), "+
		"exec (the writer runs under `claimd exec`), keeper (`claimd keeper` runs the fence command too), or auto (exec when the built claimd has it)")

var (
	fwToolOnce sync.Once
	fwToolPath string
	fwToolErr  error
)

// fwTool builds integration/testdata/fencewriter once, without the race
// detector: a writer is a workload, not code under test.
func fwTool(t *testing.T) string {
	t.Helper()
	fwToolOnce.Do(func() {
		dir, err := os.MkdirTemp("", "claimd-fencewriter-")
		if err != nil {
			fwToolErr = err
			return
		}
		fwToolPath = filepath.Join(dir, "fencewriter")
		// Tests run in their package's directory.
		cmd := exec.Command("go", "build", "-o", fwToolPath, "../testdata/fencewriter")
		if out, err := cmd.CombinedOutput(); err != nil {
			fwToolErr = fmt.Errorf("go build fencewriter: %v\n%s", err, out)
		}
	})
	if fwToolErr != nil {
		t.Fatal(fwToolErr)
	}
	return fwToolPath
}

// fenceHook is the agent's -fence-command: a script whose behaviour the
// test sets through a mode file, so one agent serves every nemesis
// without a restart. Modes:
//
//	kill  kill -9 the allocation's writer (pid from <dir>/<alloc>.pid) and
//	      wait until it is gone: the pattern of the node-loss test
//	fail  exit 1 without touching the writer
//	hang  start `sleep 600` and wait for it: a hook that never returns.
//	      The sleep's pid goes to <dir>/hang.pids, so the test can tell
//	      whether the agent left it behind.
//
// Every run is logged to <dir>/hook.log with its mode and IDs.
type fenceHook struct {
	dir string
}

func newFenceHook(t *testing.T) *fenceHook {
	t.Helper()
	h := &fenceHook{dir: t.TempDir()}
	script := fmt.Sprintf(`d=%s
mode=$(cat "$d/mode" 2>/dev/null)
echo "$(date +%%s%%N) start mode=$mode alloc=$CLAIMD_ALLOC_ID volume=$CLAIMD_VOLUME_ID sh=$$" >> "$d/hook.log"
case "$mode" in
fail) echo "fence hook: told to fail" >&2; exit 1 ;;
hang) sleep 600 & echo $! >> "$d/hang.pids"; wait; exit 1 ;;
esac
pid=$(cat "$d/$CLAIMD_ALLOC_ID.pid" 2>/dev/null) || exit 0
kill -9 "$pid" 2>/dev/null
i=0; while [ -d /proc/"$pid" ] && [ "$(cut -d' ' -f3 /proc/"$pid"/stat 2>/dev/null)" != Z ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
echo "$(date +%%s%%N) killed alloc=$CLAIMD_ALLOC_ID pid=$pid" >> "$d/hook.log"
`, h.dir)
	if err := os.WriteFile(filepath.Join(h.dir, "hook.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h.setMode(t, "kill")
	return h
}

// command is the agent's -fence-command.
func (h *fenceHook) command() string { return "/bin/sh " + filepath.Join(h.dir, "hook.sh") }

func (h *fenceHook) setMode(t *testing.T, mode string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, "mode"), []byte(mode), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pidFile is where an allocation's writer writes its pid for the hook.
func (h *fenceHook) pidFile(alloc string) string { return filepath.Join(h.dir, alloc+".pid") }

// runs counts the hook's starts for an allocation.
func (h *fenceHook) runs(alloc string) int {
	b, _ := os.ReadFile(filepath.Join(h.dir, "hook.log"))
	return strings.Count(string(b), " alloc="+alloc+" volume=")
}

// hangPids are the `sleep 600` processes hang mode started.
func (h *fenceHook) hangPids() []int {
	b, _ := os.ReadFile(filepath.Join(h.dir, "hang.pids"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// fwLauncher is how a writer is tied to its node's lease: what the
// fencing nemeses test. Either launcher runs the same writer and the same
// fence command; they differ in what stops the writer.
type fwLauncher interface {
	name() string
	// setup starts what the launcher needs on every node, once.
	setup(t *testing.T, b fcBackend, h *fenceHook)
	// argv is the command line running writer as alloc's workload of vol
	// on n.
	argv(n fcNode, alloc, vol string, writer []string) []string
	// stopsWithClaim: the launcher stops the writer itself when the agent
	// unmounts the volume at an ordinary stop (claimd exec does, on the
	// claim's Stopping); otherwise the test stops the writer first, as an
	// orchestrator stops a task before its volumes.
	stopsWithClaim() bool
	// covers reports whether the launcher can stop a writer when the fence
	// command behaves as hookMode says: a keeper runs the same command as
	// the agent, so a fence command that fails or hangs defeats both.
	covers(hookMode string) bool
}

// fwHook: nothing but the agent's fence command stops the writer (the
// hook kills it by pid). What the node-loss test and operators without
// `claimd exec` rely on: the fence holds only while the agent runs.
type fwHook struct{}

func (fwHook) name() string                            { return "hook" }
func (fwHook) setup(*testing.T, fcBackend, *fenceHook) {}
func (fwHook) argv(_ fcNode, _, _ string, writer []string) []string {
	return writer
}
func (fwHook) stopsWithClaim() bool { return false }
func (fwHook) covers(string) bool   { return true }

// fwExec: the writer runs under `claimd exec`, which kills it when the
// lease in the agent's published lease file cannot be shown live, with
// or without the agent (the fence command still runs too).
type fwExec struct{ bin string }

func (fwExec) name() string                            { return "exec" }
func (fwExec) setup(*testing.T, fcBackend, *fenceHook) {}
func (e fwExec) argv(n fcNode, alloc, vol string, writer []string) []string {
	return append([]string{e.bin, "exec", "-alloc", alloc, "-volume", vol, "-data-dir", n.dataDir(), "--"}, writer...)
}
func (fwExec) stopsWithClaim() bool { return true }
func (fwExec) covers(string) bool   { return true }

// fwKeeper: the writer runs on its own, as a container or a service
// would, and `claimd keeper` (one per node, a process of its own next to
// the agent) runs the same fence command when the agent has not renewed
// the lease by the deadline.
type fwKeeper struct {
	fwHook
	bin string
}

func (fwKeeper) name() string { return "keeper" }
func (k fwKeeper) setup(t *testing.T, b fcBackend, h *fenceHook) {
	t.Helper()
	a, bn := b.nodes()
	for _, n := range []fcNode{a, bn} {
		cmd := b.command(n, []string{k.bin, "keeper", "-data-dir", n.dataDir(), "-fence-command", h.command(),
			"-fence-timeout", "1s", "-state-dir", n.dataDir() + "-keeper", "-log-level", "debug"})
		out, err := os.OpenFile(filepath.Join(b.logDir(), n.name()+"-keeper.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		out.Close() // the child holds its own descriptor
		if err != nil {
			t.Fatal(err)
		}
		b.keep(n.name()+"-keeper", cmd)
	}
}
func (fwKeeper) covers(hookMode string) bool { return hookMode == "kill" }

// hasExec reports whether the built claimd has `claimd exec` with the
// flags fwExec passes.
func hasExec(bin string) bool {
	out, _ := exec.Command(bin, "exec", "-help").CombinedOutput()
	return bytes.Contains(out, []byte("-alloc")) && bytes.Contains(out, []byte("-data-dir"))
}

// hasKeeper reports whether the built claimd has `claimd keeper` with the
// flags fwKeeper passes.
func hasKeeper(bin string) bool {
	out, _ := exec.Command(bin, "keeper", "-help").CombinedOutput()
	return bytes.Contains(out, []byte("-fence-command")) && bytes.Contains(out, []byte("-state-dir"))
}

// fwPickLauncher is the launcher -chaos.fence-launcher asks for.
func fwPickLauncher(t *testing.T, bin string) fwLauncher {
	t.Helper()
	switch *flagFenceLauncher {
	case "hook":
		return fwHook{}
	case "exec":
		if !hasExec(bin) {
			t.Fatalf("-chaos.fence-launcher=exec: %s has no `claimd exec` with -alloc and -data-dir", bin)
		}
		return fwExec{bin: bin}
	case "keeper":
		if !hasKeeper(bin) {
			t.Fatalf("-chaos.fence-launcher=keeper: %s has no `claimd keeper` with -fence-command and -state-dir", bin)
		}
		return fwKeeper{bin: bin}
	case "auto":
		if hasExec(bin) {
			return fwExec{bin: bin}
		}
		return fwHook{}
	default:
		t.Fatalf("-chaos.fence-launcher: exp: hook, exec, keeper or auto got: %q", *flagFenceLauncher)
		return nil
	}
}

// fwWriter is one running fencewriter (under its launcher) on a host.
type fwWriter struct {
	id      string
	log     string // its own record log
	pidFile string
	cmd     *exec.Cmd
	done    chan struct{}
}

// fwStart runs a writer for alloc on w through mount and returns once it
// wrote its first record.
func fwStart(t *testing.T, b fcBackend, l fwLauncher, tool string, h *fenceHook, n fcNode, alloc, vol, mount string) *fwWriter {
	t.Helper()
	wr := &fwWriter{
		id:      n.name() + ":" + alloc,
		log:     filepath.Join(b.logDir(), "writer-"+alloc+".records"),
		pidFile: h.pidFile(alloc),
	}
	_ = os.Remove(wr.pidFile)
	argv := l.argv(n, alloc, vol, []string{tool, "-id", wr.id, "-mount", mount, "-log", wr.log, "-pidfile", wr.pidFile})
	out, err := os.OpenFile(filepath.Join(b.logDir(), "writer-"+alloc+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the child holds its own descriptor
	wr.cmd = b.command(n, argv)
	wr.cmd.Stdout, wr.cmd.Stderr = out, out
	wr.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := wr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wr.done = make(chan struct{})
	go func() { _ = wr.cmd.Wait(); close(wr.done) }()
	t.Cleanup(wr.kill)
	// A writer starts in milliseconds; claimd exec first waits for the
	// lease file to list the claim (the agent writes it as it mounts).
	if err := nsPoll(20*time.Second, func() error {
		if n := wr.records(); n == 0 {
			if nsClosed(wr.done) {
				return fmt.Errorf("writer %s exited: %s", wr.id, nsTail(out.Name(), 10))
			}
			return fmt.Errorf("writer %s exp: a record got: none", wr.id)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return wr
}

// pid is the writer's own pid (under claimd exec, not the wrapper's).
func (w *fwWriter) pid() int {
	b, err := os.ReadFile(w.pidFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive: the writer process exists and is not a zombie.
func (w *fwWriter) alive() bool {
	pid := w.pid()
	if pid == 0 {
		return !nsClosed(w.done)
	}
	st := nsProcState(pid)
	return st != 0 && st != 'Z' && st != 'X'
}

// signal sends sig to the writer itself.
func (w *fwWriter) signal(sig syscall.Signal) error {
	pid := w.pid()
	if pid == 0 {
		return fmt.Errorf("writer %s: no pid file", w.id)
	}
	return syscall.Kill(pid, sig)
}

// kill stops the writer and its launcher for good and waits for them.
func (w *fwWriter) kill() {
	if pid := w.pid(); pid != 0 && w.alive() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = w.cmd.Process.Kill()
	select {
	case <-w.done:
	case <-time.After(nsStopWait):
	}
}

// records is how many records the writer logged.
func (w *fwWriter) records() int {
	b, _ := os.ReadFile(w.log)
	return bytes.Count(b, []byte("\n"))
}

// waitDead waits up to d for the writer to end.
func (w *fwWriter) waitDead(d time.Duration) error {
	return nsPoll(d, func() error {
		if w.alive() {
			return fmt.Errorf("writer %s (pid %d) exp: stopped got: running", w.id, w.pid())
		}
		return nil
	})
}
