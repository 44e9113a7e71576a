package integration

import (
	"bytes"
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

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// `claimd exec` (issue 39): the fence does not depend on the agent
// process. A real client agent OS process (w1) holds a 3 s node lease
// and publishes it in its lease file; `claimd exec` runs a real writer as
// the workload of a fence-policy allocation. Whatever happens to the
// agent (kill -9, SIGSTOP longer than the lease), exec ends the writer
// before the lease's deadline, with no hook; the volume then moves to w2
// (an in-process agent) and the two writers never overlap.

const fxLease = 3 * time.Second

// fxEnv is a one-server cluster with w1 as an agent process,
// w2 and the controller as in-process agents, on the hostdir plugin.
type fxEnv struct {
	*releaseEnv
	agent    *harness.Process
	agentDir string
	node1    string
	pidDir   string
	hookLog  string
}

// newFxEnv starts the cluster; agentArgs are added to w1's agent
// (a -fence-command).
func newFxEnv(t *testing.T, agentArgs ...string) *fxEnv {
	t.Helper()
	c := harness.NewCluster(t, 1, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	dir := t.TempDir()
	e := &fxEnv{
		releaseEnv: &releaseEnv{c: c, root: filepath.Join(dir, "storage"),
			nodes: map[string]*harness.TestPlugin{}, clients: map[string]*harness.TestClient{}},
		agentDir: filepath.Join(dir, "w1-agent"),
		pidDir:   filepath.Join(dir, "pids"), hookLog: filepath.Join(dir, "hook.log"),
	}
	if err := os.MkdirAll(e.pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.api = c.Servers[0].Client()
	addr := c.Servers[0].Addr
	p1 := harness.StartPlugin(t, "w1", hostdir.ModeNode, e.root)
	e.nodes["w1"] = p1
	pki := c.PKI()
	args := []string{"agent", "-client", "-servers", addr, "-data-dir", e.agentDir, "-node-name", "w1",
		"-csi-plugin", "id=hostdir,type=node,socket=unix://" + p1.Socket,
		"-node-lease", fxLease.String(), "-log-level", "debug",
		"-tls-ca-file", pki.CAFile, "-tls-cert-file", pki.CertFile[tlsutil.RoleClient], "-tls-key-file", pki.KeyFile[tlsutil.RoleClient]}
	e.agent = harness.StartProcess(t, "w1-agent", append(args, agentArgs...)...)
	t.Cleanup(func() { _ = syscall.Kill(e.agent.PID(), syscall.SIGCONT) }) // a stopped agent is killed by the harness
	p2 := harness.StartPlugin(t, "w2", hostdir.ModeNode, e.root)
	e.nodes["w2"] = p2
	e.clients["w2"] = c.StartClient("w2", []string{addr}, p2.Config())
	e.controller = harness.StartPlugin(t, "ctrl", hostdir.ModeController, e.root)
	e.ctrlClient = c.StartClient("ctrl", []string{addr}, e.controller.Config())
	e.ctrlClient.AdmitControllers()
	harness.WaitFor(t, 30*time.Second, func() error {
		ctx := harness.Ctx(t, 10*time.Second)
		nodes, _, err := e.api.Nodes(ctx, structs.QueryOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Name == "w1" && n.Status == structs.NodeStatusReady {
				e.node1 = n.ID
			}
		}
		p, _, err := e.api.Plugin(ctx, "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if e.node1 == "" || p.NodesHealthy != 2 || p.ControllersHealthy != 1 {
			return fmt.Errorf("w1 agent process ready and plugin with 2 nodes, 1 controller exp got: w1 %q, %+v", e.node1, p)
		}
		return nil
	})
	v := testVolume("vf")
	v.NodeLost = structs.NodeLostFence
	if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), v); err != nil {
		t.Fatal(err)
	}
	return e
}

// place puts allocation id on node with volume vf and waits until it runs.
func (e *fxEnv) place(t *testing.T, id, node string) {
	t.Helper()
	a := &structs.Alloc{ID: id, NodeID: node, Volumes: []*structs.AllocVolumeRequest{{VolumeID: "vf"}}}
	if _, err := e.api.PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
}

// leaseFile reads w1's lease file.
func (e *fxEnv) leaseFile(t *testing.T) *leasefile.File {
	t.Helper()
	f, err := leasefile.Read(leasefile.Path(e.agentDir))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// fxWallDeadline is the lease file's Deadline as a wall-clock time (the
// writers stamp their records with the wall clock).
func fxWallDeadline(f *leasefile.File) time.Time {
	return time.Now().Add(time.Duration(f.Deadline - leasefile.Now()))
}

// fxExecProc is a `claimd exec` process.
type fxExecProc struct {
	cmd  *exec.Cmd
	out  *fxBuffer
	done chan struct{}
}

type fxBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *fxBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *fxBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fxWriterScript appends "<who> <seq> <unix nanos>" lines to records in
// the mount claimd exec names, after writing its own pid to pidFile: the
// writer is the shell itself, exec's direct child.
func fxWriterScript(who, pidFile string) string {
	return fmt.Sprintf(`echo $$ > %s; i=0; while :; do i=$((i+1)); echo "%s $i $(date +%%s%%N)" >> "$CLAIMD_MOUNT_PATH/records" || exit 1; sleep 0.02; done`,
		pidFile, who)
}

func fxStartExec(t *testing.T, args ...string) *fxExecProc {
	t.Helper()
	x := &fxExecProc{out: &fxBuffer{}, done: make(chan struct{})}
	x.cmd = exec.Command(harness.Binary(t), append([]string{"exec"}, args...)...)
	x.cmd.Stdout, x.cmd.Stderr = x.out, x.out
	// A writer that outlived exec would hold its output pipe and keep
	// Wait waiting: the wait ends when exec does, and the tests check the
	// writer themselves.
	x.cmd.WaitDelay = 100 * time.Millisecond
	if err := x.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = x.cmd.Wait(); close(x.done) }()
	t.Cleanup(func() {
		_ = x.cmd.Process.Kill()
		<-x.done
		if t.Failed() {
			t.Logf("--- output of claimd exec ---\n%s", x.out.String())
		}
	})
	return x
}

// waitExit waits for exec to end and returns its exit code.
func (x *fxExecProc) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-x.done:
		return x.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("claimd exec exp: ended within %s got: still running\n%s", timeout, x.out.String())
		return 0
	}
}

// fxReadPid waits for a writer's pid file.
func fxReadPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	harness.WaitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return pid
}

// fxAlive reports whether pid runs (a zombie does not: it writes nothing).
func fxAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// fxWaitRecords waits until the file holds at least n records of who.
func fxWaitRecords(t *testing.T, path, who string, n int) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		b, _ := os.ReadFile(path)
		if c := strings.Count(string(b), who+" "); c < n {
			return fmt.Errorf("records of %s in %s exp: %d got: %d", who, path, n, c)
		}
		return nil
	})
}

// fxLastRecord is the time of who's last record.
func fxLastRecord(t *testing.T, path, who string) time.Time {
	var last time.Time
	for _, r := range readRecords(t, path) {
		if r.who == who {
			last = r.at
		}
	}
	return last
}

// moveAndCheckNoOverlap places a3 on w2, waits for it to run (the
// volume moved), starts w2's writer and checks that no w1 record comes
// after w2's first.
func (e *fxEnv) moveAndCheckNoOverlap(t *testing.T, lost time.Time) {
	t.Helper()
	e.place(t, "a3", e.clients["w2"].NodeID())
	harness.WaitFor(t, 40*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a3", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("a3 on w2 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	t.Logf("volume moved to w2 %s after w1's agent was lost", time.Since(lost).Round(10*time.Millisecond))
	mount2 := mountPath(t, e.clients["w2"], "a3", "vf")
	startWriter(t, "w2", mount2, "")
	records := filepath.Join(mount2, "records")
	fxWaitRecords(t, records, "w2", 3)
	var firstW2 time.Time
	for _, r := range readRecords(t, records) {
		switch {
		case r.who == "w2" && firstW2.IsZero():
			firstW2 = r.at
		case r.who == "w1" && !firstW2.IsZero():
			t.Fatalf("single writer exp: no w1 record after w2's first got: w1 at %s after w2 at %s", r.at, firstW2)
		}
	}
}

// startFencedWriter places a1 on w1 and runs its writer under claimd
// exec; it returns exec, the writer's pid and the records file.
func (e *fxEnv) startFencedWriter(t *testing.T) (*fxExecProc, int, string) {
	t.Helper()
	e.place(t, "a1", e.node1)
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	pidFile := filepath.Join(e.pidDir, "w1")
	x := fxStartExec(t, "-alloc", "a1", "-data-dir", e.agentDir, "-wait", "30s", "--", "/bin/sh", "-c", fxWriterScript("w1", pidFile))
	pid := fxReadPid(t, pidFile)
	// The records as the storage holds them: the mount (a symlink with
	// the test plugins) goes away when the agent unmounts.
	c, ok := e.leaseFile(t).Claim("a1", "vf")
	if !ok {
		t.Fatal("w1's lease file exp: a1/vf listed got: not")
	}
	dir, err := filepath.EvalSymlinks(c.MountPath)
	if err != nil {
		t.Fatal(err)
	}
	records := filepath.Join(dir, "records")
	fxWaitRecords(t, records, "w1", 3)
	if out := x.out.String(); !strings.Contains(out, fmt.Sprintf("started /bin/sh as pid %d for allocation a1 volume vf", pid)) {
		t.Fatalf("claimd exec exp: says what it started got: %s", out)
	}
	return x, pid, records
}

// fxCheckFenced checks exec ended the writer for a lost lease before the
// lease's deadline.
func fxCheckFenced(t *testing.T, x *fxExecProc, pid int, records string, deadline time.Time) {
	t.Helper()
	if code := x.waitExit(t, fxLease+15*time.Second); code != 3 || !strings.Contains(x.out.String(), "fenced: the node lease could not be shown live") {
		t.Fatalf("claimd exec exp: exit 3, fenced got: %d\n%s", code, x.out.String())
	}
	if fxAlive(pid) {
		t.Fatalf("writer pid %d exp: ended with claimd exec got: alive", pid)
	}
	last := fxLastRecord(t, records, "w1")
	if !last.Before(deadline) {
		t.Fatalf("w1's last record exp: before the lease deadline %s got: %s", deadline.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
	}
	t.Logf("w1's last record %s before the lease deadline", deadline.Sub(last).Round(time.Millisecond))
}

func TestFenceExec_AgentKilledEndsTheWorkloadBeforeTheDeadline(t *testing.T) {
	e := newFxEnv(t)
	x, pid, records := e.startFencedWriter(t)
	e.agent.Kill()
	lost := time.Now()
	// The agent is gone: the file is final.
	deadline := fxWallDeadline(e.leaseFile(t))
	fxCheckFenced(t, x, pid, records, deadline)
	e.moveAndCheckNoOverlap(t, lost)
}

func TestFenceExec_AgentPausedLongerThanTheLease(t *testing.T) {
	e := newFxEnv(t)
	x, pid, records := e.startFencedWriter(t)
	if err := syscall.Kill(e.agent.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	// A renewal may have been written just before the stop: read the file
	// once it can no longer change (the agent is stopped).
	deadline := fxWallDeadline(e.leaseFile(t))
	fxCheckFenced(t, x, pid, records, deadline)
	e.moveAndCheckNoOverlap(t, lost)
	// Resumed, the agent finds its lease lost and unmounts; w1 writes
	// nothing more.
	if err := syscall.Kill(e.agent.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		if _, ok := e.leaseFile(t).Claim("a1", "vf"); ok {
			return fmt.Errorf("w1's lease file exp: a1/vf gone after the resumed agent's fence got: listed")
		}
		return nil
	})
	if last := fxLastRecord(t, records, "w1"); !last.Before(deadline) {
		t.Fatalf("w1 after the agent resumed exp: no record after the deadline got: one at %s", last)
	}
}

func TestFenceExec_KillingTheWrapperKillsTheWorkload(t *testing.T) {
	e := newFxEnv(t)
	x, pid, records := e.startFencedWriter(t)
	if err := x.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-x.done
	harness.WaitFor(t, 5*time.Second, func() error {
		if fxAlive(pid) {
			return fmt.Errorf("writer pid %d exp: killed with its wrapper (parent-death signal) got: alive", pid)
		}
		return nil
	})
	n := len(readRecords(t, records))
	// The agent is untouched: the lease stays live and the claim held.
	if v := leasefile.Judge(e.leaseFile(t), "a1", "vf", true, leasefile.Now(), leasefile.BootID()); v != leasefile.Hold {
		t.Fatalf("w1's lease exp: still held got: %s", v)
	}
	if m := len(readRecords(t, records)); m != n {
		t.Fatalf("records after the writer died exp: %d got: %d", n, m)
	}
}

func TestFenceExec_AllocStopEndsTheWorkloadAndTheReleaseCompletes(t *testing.T) {
	e := newFxEnv(t)
	x, pid, _ := e.startFencedWriter(t)
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	if code := x.waitExit(t, 30*time.Second); code != 4 || !strings.Contains(x.out.String(), "stopped: the agent released the claim") {
		t.Fatalf("claimd exec after alloc stop exp: exit 4, stopped got: %d\n%s", code, x.out.String())
	}
	if fxAlive(pid) {
		t.Fatalf("writer pid %d exp: ended got: alive", pid)
	}
	e.waitFreed(t, "vf", 30*time.Second)
	if n := countCalls(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-vf", "ok"); n == 0 {
		t.Fatal("w1 exp: the volume unmounted by the agent got: no NodeUnpublishVolume")
	}
}

// Without a cluster, on a lease file the test writes: exec waits for the
// claim with progress, passes the command's exit status through, passes
// SIGTERM to the command's group, and refuses what it cannot decide.
func TestFenceExec_SignalsExitStatusAndWaiting(t *testing.T) {
	dir := t.TempDir()
	path := leasefile.Path(dir)
	write := func(claims ...leasefile.Claim) {
		t.Helper()
		fenceAt := leasefile.Now() + int64(time.Hour)
		if err := leasefile.Write(path, &leasefile.File{NodeID: "n1", BootID: leasefile.BootID(), Lease: fxLease,
			FenceAt: fenceAt, Deadline: fenceAt + int64(time.Second), Claims: claims}); err != nil {
			t.Fatal(err)
		}
	}
	mounted := leasefile.Claim{AllocID: "a1", VolumeID: "vf", MountPath: dir, NodeLost: "fence"}

	// The claim is not there yet: exec waits, says why, and starts the
	// command once the agent lists it mounted.
	write()
	x := fxStartExec(t, "-alloc", "a1", "-lease-file", path, "-wait", "30s", "--", "/bin/sh", "-c", `exit 5`)
	harness.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(x.out.String(), "of 30s): allocation a1 is not mounted on this node yet") {
			return fmt.Errorf("claimd exec exp: says what it waits for got: %q", x.out.String())
		}
		return nil
	})
	write(mounted)
	if code := x.waitExit(t, 10*time.Second); code != 5 {
		t.Fatalf("claimd exec exp: the command's exit status 5 got: %d\n%s", code, x.out.String())
	}

	// SIGTERM to exec reaches the command, whose status is exec's.
	x = fxStartExec(t, "-alloc", "a1", "-lease-file", path, "--", "/bin/sh", "-c",
		`trap 'exit 42' TERM; echo "$CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID $CLAIMD_MOUNT_PATH $CLAIMD_NODE_ID"; while :; do sleep 0.05; done`)
	harness.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(x.out.String(), "a1 vf "+dir+" n1\n") {
			return fmt.Errorf("command exp: its environment got: %q", x.out.String())
		}
		return nil
	})
	if err := x.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := x.waitExit(t, 10*time.Second); code != 42 {
		t.Fatalf("claimd exec after SIGTERM exp: the command's status 42 got: %d\n%s", code, x.out.String())
	}

	// Refused: a claim being released, two volumes without -volume, and
	// a wait that runs out; none starts the command.
	marker := filepath.Join(dir, "started")
	for _, c := range []struct {
		name   string
		claims []leasefile.Claim
		args   []string
		want   string
	}{
		{"stopping", []leasefile.Claim{{AllocID: "a1", VolumeID: "vf", MountPath: dir, NodeLost: "fence", Stopping: true}}, nil,
			"the agent is releasing the claim"},
		{"two volumes", []leasefile.Claim{mounted, {AllocID: "a1", VolumeID: "vw", MountPath: dir, NodeLost: "wait"}}, nil,
			"-volume: allocation a1 has 2 volumes on this node (vf, vw)"},
		{"wait runs out", nil, []string{"-wait", "500ms"}, "-wait: gave up after 500ms: allocation a1 is not mounted on this node yet; the command was not started"},
	} {
		write(c.claims...)
		args := append(append([]string{"-alloc", "a1", "-lease-file", path}, c.args...), "--", "/bin/sh", "-c", "touch "+marker)
		x := fxStartExec(t, args...)
		if code := x.waitExit(t, 10*time.Second); code != 1 || !strings.Contains(x.out.String(), c.want) {
			t.Fatalf("%s: claimd exec exp: exit 1 with %q got: %d %q", c.name, c.want, code, x.out.String())
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("%s: command exp: not started got: %v", c.name, err)
		}
	}
}
