package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
)

// A restarted agent fences before anything else (issue 39), with the
// agent as a real OS process (claimd agent -client) killed with SIGKILL
// and started again on its data dir, a real writer process (a child of
// the test, as a workload outlives its agent) and the fence command
// killing it by pid. Servers, the other node and the controller run in
// process on loopback, with mutual TLS and ACLs on as in production: the
// agent process has a client certificate and no token, and reads its
// volumes' claims with its node secret (a node may read the volumes its
// allocations ask for).

const restartLease = 3 * time.Second

type restartEnv struct {
	*agentProcessEnv
	dir     string
	hookLog string
	pidDir  string
}

// newRestartEnv starts three servers, w1 (agent process, lease 3 s, the
// fence command hook with extra agent flags) and w2 plus a controller in
// process.
func newRestartEnv(t *testing.T, hook func(e *restartEnv) string, extra ...string) *restartEnv {
	t.Helper()
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	dir := t.TempDir()
	e := &restartEnv{agentProcessEnv: newAgentProcessEnv(c, dir),
		dir: dir, hookLog: filepath.Join(dir, "hook.log"), pidDir: filepath.Join(dir, "pids")}
	if err := os.MkdirAll(e.pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.startNodes(t, append([]string{"-node-lease", restartLease.String(), "-fence-command", hook(e)}, extra...)...)
	return e
}

func (e *restartEnv) register(t *testing.T, id string, policy structs.NodeLostPolicy) {
	t.Helper()
	registerWithPolicy(t, e.api, id, policy)
}

func (e *restartEnv) place(t *testing.T, allocID, nodeID, vol string) {
	t.Helper()
	a := &structs.Alloc{ID: allocID, NodeID: nodeID, Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}}
	if _, err := e.api.PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
}

// heldClaimPath is where the agent with data dir dir mounted vol for alloc
// ("" while it holds no such claim).
func heldClaimPath(t *testing.T, dir, alloc, vol string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "held-claims.json"))
	if err != nil {
		return "", false
	}
	var held []struct {
		AllocID   string `json:"alloc_id"`
		VolumeID  string `json:"volume_id"`
		MountPath string `json:"mount_path"`
	}
	if err := json.Unmarshal(b, &held); err != nil {
		t.Fatalf("held-claims.json: %v", err)
	}
	for _, h := range held {
		if h.AllocID == alloc && h.VolumeID == vol {
			return h.MountPath, true
		}
	}
	return "", false
}

// runWriting runs alloc on w1 with vol and a writer process through its
// mount, whose pid the fence command finds.
func (e *restartEnv) runWriting(t *testing.T, alloc, vol string) (*writer, string) {
	t.Helper()
	e.place(t, alloc, e.w1Node, vol)
	e.waitAlloc(t, alloc, structs.AllocClientRunning)
	var mount string
	harness.WaitFor(t, 10*time.Second, func() error {
		if p, _ := heldClaimPath(t, e.w1Data, alloc, vol); p != "" {
			mount = p
			return nil
		}
		return fmt.Errorf("w1 held claim %s/%s exp: mounted got: not yet", alloc, vol)
	})
	wr := startWriter(t, "w1", mount, filepath.Join(e.pidDir, alloc+"-"+vol))
	harness.WaitFor(t, 10*time.Second, func() error {
		if b, _ := os.ReadFile(filepath.Join(mount, "records")); strings.Count(string(b), "\n") < 3 {
			return fmt.Errorf("writer records exp: some got: %q", b)
		}
		return nil
	})
	return wr, mount
}

// waitLeaseRunOut waits until the fence start in w1's lease file passed:
// the lease the killed agent left cannot be shown live any more.
func (e *restartEnv) waitLeaseRunOut(t *testing.T) {
	t.Helper()
	harness.WaitFor(t, 2*restartLease+5*time.Second, func() error {
		f, err := leasefile.Read(leasefile.Path(e.w1Data))
		if err != nil {
			return err
		}
		if left := f.Remaining(leasefile.Now()); left >= 0 {
			return fmt.Errorf("w1 lease file exp: fence start passed got: %s left", left)
		}
		return nil
	})
}

// hookLine is one line of the hook log: "<unix ns> <what> <alloc> <volume>".
type hookLine struct {
	at               time.Time
	what, alloc, vol string
}

func readHookLog(t *testing.T, path string) []hookLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []hookLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, hookLine{at: time.Unix(0, ns), what: f[1], alloc: f[2], vol: f[3]})
	}
	return out
}

// killHook logs start and end around killing the writer found by pid file
// and waiting until it is gone; sleepAfter keeps the hook running a while
// after that, so that anything that happens during the hook is seen.
func killHook(hookLog, pidDir, sleepAfter string) string {
	return fmt.Sprintf(`echo "$(date +%%s%%N) start $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID $CLAIMD_NODE_ID" >> %[1]s
pid=$(cat %[2]s/$CLAIMD_ALLOC_ID-$CLAIMD_VOLUME_ID 2>/dev/null) && kill -9 "$pid" 2>/dev/null
i=0; while [ -n "$pid" ] && [ -d /proc/"$pid" ] && [ "$(cut -d' ' -f3 /proc/"$pid"/stat 2>/dev/null)" != Z ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
sleep %[3]s
echo "$(date +%%s%%N) end $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID" >> %[1]s`, hookLog, pidDir, sleepAfter)
}

// writerGone waits for the writer to have been killed.
func writerGone(t *testing.T, wr *writer, within time.Duration, what string) {
	t.Helper()
	select {
	case <-wr.done:
	case <-time.After(within):
		t.Fatalf("writer on w1 exp: killed by the fence command %s got: still writing", what)
	}
}

// (a) kill -9 while a writer writes through a fence-policy mount; the
// servers release after the lease and give the volume to w2; the agent,
// restarted later, runs the fence command and unmounts before the node
// is ready again and before any allocation of it starts.
func TestNodeFence_RestartedAgentFencesBeforeReady(t *testing.T) {
	// The hook takes a while after the kill (0.3 s, within -fence-timeout),
	// so that a node that registered during it would be seen ready.
	e := newRestartEnv(t, func(e *restartEnv) string { return killHook(e.hookLog, e.pidDir, "0.3") }, "-fence-timeout", "700ms")
	e.register(t, "vf", structs.NodeLostFence)
	e.register(t, "vw", structs.NodeLostWait)
	wr, _ := e.runWriting(t, "a1", "vf")
	w2 := e.clients["w2"].NodeID()

	killed := time.Now()
	e.w1.Kill()
	// The servers release vf once the lease has certainly run out, and w2
	// takes it. w1's writer still writes: nothing on w1 stops it while no
	// agent runs there (claimd exec and the keeper are the layer for that).
	e.place(t, "a3", w2, "vf")
	harness.WaitFor(t, structs.LeaseExpiry(restartLease)+25*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a3", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("a3 on w2 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	t.Logf("vf moved to w2 %s after w1's agent was killed", time.Since(killed).Round(10*time.Millisecond))
	select {
	case <-wr.done:
		t.Fatal("w1's writer exp: still running while no agent runs there got: gone")
	default:
	}
	e.waitW1Down(t)

	// Watch w1's status from before the restart: the first time it shows
	// ready.
	readyCh := make(chan time.Time, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx := harness.Ctx(t, 5*time.Second)
			n, _, err := e.api.Node(ctx, e.w1Node, structs.QueryOptions{AllowStale: true})
			if err == nil && n.Status == structs.NodeStatusReady {
				readyCh <- time.Now()
				return
			}
		}
	}()
	e.w1.Restart()
	writerGone(t, wr, 15*time.Second, "of the restarted agent")
	var ready time.Time
	select {
	case ready = <-readyCh:
	case <-time.After(30 * time.Second):
		t.Fatal("w1 exp: ready again after its restart got: not ready")
	}
	// A node that is ready runs allocations again (a down node takes
	// none, so the first can only be placed now).
	e.place(t, "a2", e.w1Node, "vw")
	e.waitAlloc(t, "a2", structs.AllocClientRunning)

	var start, end time.Time
	for _, l := range readHookLog(t, e.hookLog) {
		if l.alloc == "a1" && l.vol == "vf" && l.what == "start" && start.IsZero() {
			start = l.at
		}
		if l.alloc == "a1" && l.vol == "vf" && l.what == "end" && end.IsZero() {
			end = l.at
		}
	}
	unpub := firstOK(e.w1Plugin.Audit(), "NodeUnpublishVolume", "ext-vf", "")
	pub := firstOK(e.w1Plugin.Audit(), "NodePublishVolume", "ext-vw", "")
	if start.IsZero() || end.IsZero() || unpub.IsZero() || pub.IsZero() {
		t.Fatalf("exp: hook start and end, vf unpublished and vw published on w1 got: %s %s %s %s", start, end, unpub, pub)
	}
	// The order: the fence command, then the unmount, then the node is
	// ready and its allocations start.
	if !end.Before(unpub) || !unpub.Before(ready) || !end.Before(pub) {
		t.Fatalf("order exp: hook end < vf unpublish < w1 ready, a2's publish after the hook got: hook %s-%s, unpublish %s, ready seen %s, a2 publish %s",
			start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), unpub.Format(time.RFC3339Nano),
			ready.Format(time.RFC3339Nano), pub.Format(time.RFC3339Nano))
	}
	if _, ok := heldClaimPath(t, e.w1Data, "a1", "vf"); ok {
		t.Fatal("w1 held claims exp: a1/vf gone after the fence got: still held")
	}
	harness.WaitFor(t, 20*time.Second, func() error {
		n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), e.w1Node, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.LastFence == nil || len(n.LastFence.Volumes) != 1 || !n.LastFence.Volumes[0].HookOK || !n.LastFence.Volumes[0].Unmounted {
			return fmt.Errorf("w1 exp: fence report of vf, hook ok and unmounted got: %+v", n.LastFence)
		}
		return nil
	})
	if out := e.w1.Output(); !strings.Contains(out, "agent started without a node lease shown live") {
		t.Fatalf("w1 exp: says it fences at start got:\n%s", out)
	}
}

// (b) The operator's report: wait policy, the agent killed, `claimd volume
// detach -force VOL NODE`, the volume taken on w2, the agent back: it runs
// the fence command and unmounts, since the servers no longer hold the
// claim for it.
func TestNodeFence_ForceDetachedWhileAwayIsFencedOnReturn(t *testing.T) {
	e := newRestartEnv(t, func(e *restartEnv) string { return killHook(e.hookLog, e.pidDir, "0") }, "-fence-timeout", "700ms")
	e.register(t, "vw", structs.NodeLostWait)
	wr, _ := e.runWriting(t, "a1", "vw")
	e.w1.Kill()
	r := harness.RunCLIEnv(t, e.cliEnv(t), "volume", "detach", "-force", "vw", e.w1Node)
	if r.Code != 0 {
		t.Fatalf("volume detach -force exp: exit 0 got: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	e.place(t, "a3", e.clients["w2"].NodeID(), "vw")
	e.waitAlloc(t, "a3", structs.AllocClientRunning)

	e.w1.Restart()
	writerGone(t, wr, 20*time.Second, "of the agent that came back")
	harness.WaitFor(t, 20*time.Second, func() error {
		if _, ok := heldClaimPath(t, e.w1Data, "a1", "vw"); ok {
			return fmt.Errorf("w1 held claims exp: a1/vw gone got: still held")
		}
		if n := countCalls(e.w1Plugin.Audit(), "NodeUnpublishVolume", "ext-vw", "ok"); n == 0 {
			return fmt.Errorf("w1 NodeUnpublish of vw exp: done got: none")
		}
		return nil
	})
	lines := readHookLog(t, e.hookLog)
	if len(lines) == 0 || lines[0].alloc != "a1" || lines[0].vol != "vw" {
		t.Fatalf("fence command exp: run for a1/vw got: %+v", lines)
	}
	out := e.w1.Output()
	if !strings.Contains(out, "the servers no longer hold volume vw for this node") || !strings.Contains(out, "force detach") {
		t.Fatalf("w1 exp: says the servers released vw by a force detach got:\n%s", out)
	}
	// The allocation cannot run here any more: reported failed.
	e.waitAlloc(t, "a1", structs.AllocClientFailed)
}

// (c) A fence command that exits 1 is not the end: the agent logs an
// ERROR naming the allocation, the volume and "may still be written on
// node <id>", and runs the command again (not only the unmount) until it
// succeeds.
func TestNodeFence_FailedFenceCommandIsRetriedWithTheHook(t *testing.T) {
	e := newRestartEnv(t, func(e *restartEnv) string {
		count := filepath.Join(e.dir, "attempts")
		return fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s
if [ "$n" -eq 1 ]; then echo "$(date +%%s%%N) refused $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID" >> %[2]s; echo "storage API unreachable" >&2; exit 1; fi
`, count, e.hookLog) + killHook(e.hookLog, e.pidDir, "0")
	}, "-fence-timeout", "700ms")
	e.register(t, "vf", structs.NodeLostFence)
	wr, _ := e.runWriting(t, "a1", "vf")
	e.w1.Kill()
	e.waitLeaseRunOut(t)
	e.w1.Restart()
	// (The unmount of the first attempt already ends this writer: with
	// the test plugin's symlink mounts its next append fails. The retry
	// of the command is what is under test.)
	writerGone(t, wr, 20*time.Second, "or the unmount")
	harness.WaitFor(t, 20*time.Second, func() error {
		lines := readHookLog(t, e.hookLog)
		if len(lines) < 3 || lines[0].what != "refused" || lines[1].what != "start" || lines[2].what != "end" ||
			lines[1].alloc != "a1" || lines[1].vol != "vf" {
			return fmt.Errorf("hook log exp: a refused attempt, then one that ran for a1/vf got: %+v", lines)
		}
		if gap := lines[1].at.Sub(lines[0].at); gap < time.Second {
			return fmt.Errorf("retry exp: about 2s after the failure got: %s", gap)
		}
		return nil
	})
	want := fmt.Sprintf("volume vf may still be written on node %s", e.w1Node)
	harness.WaitFor(t, 10*time.Second, func() error {
		for _, l := range strings.Split(e.w1.Output(), "\n") {
			if strings.Contains(l, "[ERROR]") && strings.Contains(l, want) && strings.Contains(l, "alloc=a1") &&
				strings.Contains(l, "volume=vf") && strings.Contains(l, "exit status 1") {
				return nil
			}
		}
		return fmt.Errorf("w1 exp: an ERROR with %q, alloc, volume and the exit status got:\n%s", want, e.w1.Output())
	})
	harness.WaitFor(t, 20*time.Second, func() error {
		n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), e.w1Node, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.LastFence == nil || len(n.LastFence.Volumes) != 1 || !n.LastFence.Volumes[0].HookOK || !n.LastFence.Volumes[0].Unmounted {
			return fmt.Errorf("w1 exp: the fence of vf reported done after the retry got: %+v", n.LastFence)
		}
		return nil
	})
	if _, ok := heldClaimPath(t, e.w1Data, "a1", "vf"); ok {
		t.Fatal("w1 held claims exp: a1/vf gone once the retry succeeded got: still held")
	}
}

// (d) A fence command that hangs is killed at -fence-timeout, its whole
// process group with it (its `sleep 600` child too), and run again.
func TestNodeFence_HangingFenceCommandGroupKilledAtTimeout(t *testing.T) {
	e := newRestartEnv(t, func(e *restartEnv) string {
		return fmt.Sprintf(`echo "$(date +%%s%%N) start $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID" >> %[1]s
sleep 600 &
echo "$! $(date +%%s%%N)" >> %[2]s
wait`, e.hookLog, filepath.Join(e.dir, "sleeps"))
	}, "-fence-timeout", "500ms")
	sleeps := filepath.Join(e.dir, "sleeps")
	e.register(t, "vf", structs.NodeLostFence)
	_, _ = e.runWriting(t, "a1", "vf")
	e.w1.Kill()
	e.waitLeaseRunOut(t)
	e.w1.Restart()
	t.Cleanup(func() {
		// The agent is killed at the end while a hook may run: its group
		// is not the test's to leave behind.
		e.w1.Kill()
		for _, s := range readSleeps(t, sleeps) {
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
		}
	})
	// Two attempts at least: the retry runs the command again.
	harness.WaitFor(t, 20*time.Second, func() error {
		if n := len(readSleeps(t, sleeps)); n < 2 {
			return fmt.Errorf("hook runs exp: at least 2 got: %d", n)
		}
		return nil
	})
	for _, s := range readSleeps(t, sleeps)[:2] {
		// Killed at the timeout (500 ms), with slack for a busy machine.
		harness.WaitFor(t, 5*time.Second, func() error {
			if alive(s.pid) {
				return fmt.Errorf("sleep 600 (pid %d) started by the fence command %s ago exp: killed with its group got: alive",
					s.pid, time.Since(s.at).Round(time.Millisecond))
			}
			return nil
		})
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		out := e.w1.Output()
		if !strings.Contains(out, "did not finish within 500ms; its process group was killed") ||
			!strings.Contains(out, "may still be written on node "+e.w1Node) {
			return fmt.Errorf("w1 exp: the timeout and the ERROR got:\n%s", out)
		}
		return nil
	})
}

type sleepRun struct {
	pid int
	at  time.Time
}

func readSleeps(t *testing.T, path string) []sleepRun {
	t.Helper()
	b, _ := os.ReadFile(path)
	var out []sleepRun
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		ns, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			out = append(out, sleepRun{pid: pid, at: time.Unix(0, ns)})
		}
	}
	return out
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// (e) A graceful stop (SIGTERM) of an agent holding a fence-policy claim
// leaves the workload and the mount, keeps the lease file's deadline and
// says when the workload will be fenced if no agent is back; an agent
// back within the lease (an upgrade) shows the lease live from the file
// and fences nothing.
func TestNodeFence_GracefulStopLeavesWorkloadsWithinTheLease(t *testing.T) {
	// A longer lease: the stop and the start must fit in it on a busy
	// machine (the fence start is lease·0.95 - lease/4 after a renewal).
	e := newRestartEnv(t, func(e *restartEnv) string { return killHook(e.hookLog, e.pidDir, "0") }, "-node-lease", "8s")
	e.register(t, "vf", structs.NodeLostFence)
	wr, _ := e.runWriting(t, "a1", "vf")
	if err := e.w1.Signal(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	stopped, err := leasefile.Read(leasefile.Path(e.w1Data))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := stopped.Claim("a1", "vf")
	if !ok || c.Stopping || stopped.Remaining(leasefile.Now()) <= 0 {
		t.Fatalf("lease file after the stop exp: a1/vf held, not stopping, fence start ahead got: %+v", stopped)
	}
	var warn string
	for _, l := range strings.Split(e.w1.Output(), "\n") {
		if strings.Contains(l, "[WARN]") && strings.Contains(l, "agent stopping with fence-policy volumes mounted") {
			warn = l
		}
	}
	if !strings.Contains(warn, "fence_at=") || !strings.Contains(warn, "a1/vf") {
		t.Fatalf("w1 exp: a WARN naming a1/vf and when it is fenced got: %q\n%s", warn, e.w1.Output())
	}
	select {
	case <-wr.done:
		t.Fatal("writer after a graceful stop exp: still running got: gone")
	default:
	}
	if p, _ := heldClaimPath(t, e.w1Data, "a1", "vf"); p == "" {
		t.Fatal("w1 held claims after a graceful stop exp: a1/vf mounted got: gone")
	}

	// Back within the lease: carries on with its predecessor's deadline,
	// then renews; nothing is fenced.
	e.w1.Restart()
	harness.WaitFor(t, 20*time.Second, func() error {
		f, err := leasefile.Read(leasefile.Path(e.w1Data))
		if err != nil {
			return err
		}
		if f.Deadline <= stopped.Deadline || f.AgentPID != e.w1.PID() {
			return fmt.Errorf("lease file exp: renewed by the new agent got: deadline %d (was %d), pid %d", f.Deadline, stopped.Deadline, f.AgentPID)
		}
		return nil
	})
	if out := e.w1.Output(); !strings.Contains(out, "published is live") || strings.Contains(out, "agent started without a node lease shown live") {
		t.Fatalf("restarted w1 exp: the lease shown live, no start-up fence got:\n%s", out)
	}
	if lines := readHookLog(t, e.hookLog); len(lines) != 0 {
		t.Fatalf("fence command after a restart within the lease exp: not run got: %+v", lines)
	}
	select {
	case <-wr.done:
		t.Fatal("writer after a restart within the lease exp: still running got: gone")
	default:
	}
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
}
