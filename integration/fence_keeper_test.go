package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
)

// `claimd keeper` (issue 39): for a workload claimd does not start, the
// deadline and the fence command are held by a process that outlives the
// agent. The agent process is killed with kill -9 (it runs no fence
// command of its own here): the keeper runs the fence command, which
// kills the writer by its pid, at the lease's FenceAt, before its
// Deadline; a keeper that was down when the lease ran out fences at once
// when it starts, and a keeper restarted after its fence does not redo it.

// keeperHook logs its environment and kills the writer named by its pid
// file, waiting until it is gone.
func (e *fxEnv) keeperHook() string {
	return fmt.Sprintf(`echo "$CLAIMD_NODE_ID $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID $CLAIMD_MOUNT_PATH" >> %s
pid=$(cat %s/$CLAIMD_ALLOC_ID-$CLAIMD_VOLUME_ID 2>/dev/null) || exit 0
kill -9 "$pid" 2>/dev/null
i=0; while [ -d /proc/"$pid" ] && [ "$(cut -d' ' -f3 /proc/"$pid"/stat 2>/dev/null)" != Z ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done`,
		e.hookLog, e.pidDir)
}

func (e *fxEnv) startKeeper(t *testing.T, stateDir string) *harness.Process {
	t.Helper()
	k := harness.StartProcess(t, "keeper", "keeper", "-data-dir", e.agentDir, "-fence-command", e.keeperHook(),
		"-fence-timeout", "5s", "-state-dir", stateDir, "-log-level", "debug")
	harness.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(k.Output(), "first look at the lease file") {
			return fmt.Errorf("keeper exp: started and read the lease file got: %q", k.Output())
		}
		return nil
	})
	return k
}

// startKeptWriter places a1 on w1 and starts a writer outside claimd (a
// plain process, as a container would be) with its pid file for the hook.
func (e *fxEnv) startKeptWriter(t *testing.T) (*writer, string) {
	t.Helper()
	e.place(t, "a1", e.node1)
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	c, ok := e.leaseFile(t).Claim("a1", "vf")
	if !ok || c.MountPath == "" {
		t.Fatalf("w1's lease file exp: a1/vf with its mount got: %+v", c)
	}
	dir, err := filepath.EvalSymlinks(c.MountPath)
	if err != nil {
		t.Fatal(err)
	}
	w := startWriter(t, "w1", c.MountPath, filepath.Join(e.pidDir, "a1-vf"))
	records := filepath.Join(dir, "records")
	fxWaitRecords(t, records, "w1", 3)
	return w, records
}

func TestFenceKeeper_AgentKilledKeeperFencesAtTheDeadline(t *testing.T) {
	e := newFxEnv(t)
	keeper := e.startKeeper(t, t.TempDir())
	w, records := e.startKeptWriter(t)
	mount, _ := e.leaseFile(t).Claim("a1", "vf")

	e.agent.Kill()
	lost := time.Now()
	deadline := fxWallDeadline(e.leaseFile(t))
	select {
	case <-w.done:
	case <-time.After(fxLease + 15*time.Second):
		t.Fatalf("writer exp: killed by the keeper's fence command got: still running\n%s", keeper.Output())
	}
	if last := fxLastRecord(t, records, "w1"); !last.Before(deadline) {
		t.Fatalf("w1's last record exp: before the lease deadline %s got: %s", deadline.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
	} else {
		t.Logf("w1's last record %s before the lease deadline", deadline.Sub(last).Round(time.Millisecond))
	}
	b, _ := os.ReadFile(e.hookLog)
	if want := e.node1 + " a1 vf " + mount.MountPath + "\n"; string(b) != want {
		t.Fatalf("fence command exp: run once with %q got: %q", want, b)
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		if out := keeper.Output(); !strings.Contains(out, "fence command succeeded: alloc=a1 ") || !strings.Contains(out, " volume=vf ") {
			return fmt.Errorf("keeper log exp: the fence of alloc a1 volume vf succeeded got: %s", out)
		}
		return nil
	})
	if strings.Contains(keeper.Output(), "s3cret") {
		t.Fatal("keeper log exp: no secret got: the volume's secret")
	}
	e.moveAndCheckNoOverlap(t, lost)
}

func TestFenceKeeper_RestartedAfterTheDeadlineFencesAtOnce(t *testing.T) {
	e := newFxEnv(t)
	stateDir := t.TempDir()
	keeper := e.startKeeper(t, stateDir)
	w, _ := e.startKeptWriter(t)
	// The keeper has seen the claim (its state holds it), then is down
	// when the agent dies and the lease runs out.
	harness.WaitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(stateDir, "keeper-state.json"))
		if err != nil || !strings.Contains(string(b), `"alloc_id":"a1"`) {
			return fmt.Errorf("keeper state exp: a1 recorded got: %s %v", b, err)
		}
		return nil
	})
	keeper.Kill()
	e.agent.Kill()
	f := e.leaseFile(t)
	harness.WaitFor(t, fxLease+10*time.Second, func() error {
		if now := leasefile.Now(); now <= f.Deadline {
			return fmt.Errorf("lease exp: past its deadline got: %s left", time.Duration(f.Deadline-now))
		}
		return nil
	})
	// Nothing else stops this writer: it still runs after the deadline.
	select {
	case <-w.done:
		t.Fatal("writer exp: still running with agent and keeper down got: ended")
	default:
	}
	started := time.Now()
	keeper.Restart()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("writer exp: killed at once by the restarted keeper got: still running\n%s", keeper.Output())
	}
	t.Logf("restarted keeper fenced %s after its start", time.Since(started).Round(time.Millisecond))
	if runs := strings.Count(fxReadFile(t, e.hookLog), "\n"); runs != 1 {
		t.Fatalf("fence command exp: run once got: %d", runs)
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		b, _ := os.ReadFile(filepath.Join(stateDir, "keeper-state.json"))
		if !strings.Contains(string(b), `"done":{"a1/vf"`) {
			return fmt.Errorf("keeper state exp: the fence of a1/vf recorded got: %s", b)
		}
		return nil
	})
	// Restarted again, it does not redo the fence it recorded.
	keeper.Restart()
	harness.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(keeper.Output(), "first look at the lease file") {
			return fmt.Errorf("keeper exp: started and read the lease file got: %q", keeper.Output())
		}
		return nil
	})
	if out := keeper.Output(); strings.Contains(out, "running the fence command") || !strings.Contains(out, "fenced_before=1") {
		t.Fatalf("keeper restarted after its fence exp: the fence recorded, not run again got: %s", out)
	}
	if runs := strings.Count(fxReadFile(t, e.hookLog), "\n"); runs != 1 {
		t.Fatalf("fence command after a second restart exp: still run once got: %d", runs)
	}
}

func fxReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A fence command that fails is logged at ERROR, naming the volume that
// may still be written, and retried until it succeeds; then it is not run
// again for that lapse. A lapse that ends (the agent renewed) before the
// command succeeded stops the retries. The lease file is written by the
// test here: the keeper reads nothing else.
func TestFenceKeeper_FailingCommandRetriedUntilItSucceeds(t *testing.T) {
	dir := t.TempDir()
	path := leasefile.Path(dir)
	boot := leasefile.BootID()
	claims := []leasefile.Claim{
		{AllocID: "a1", VolumeID: "vf", MountPath: "/mnt/vf", NodeLost: "fence"},
		{AllocID: "a2", VolumeID: "vw", MountPath: "/mnt/vw", NodeLost: "wait"},
	}
	write := func(fenceAt int64) {
		t.Helper()
		if err := leasefile.Write(path, &leasefile.File{NodeID: "n1", BootID: boot, Lease: 3 * time.Second,
			FenceAt: fenceAt, Deadline: fenceAt + int64(750*time.Millisecond), Claims: claims}); err != nil {
			t.Fatal(err)
		}
	}
	write(leasefile.Now() + int64(time.Hour))
	runs := filepath.Join(dir, "runs")
	// Fails its first two runs, then succeeds.
	hook := fmt.Sprintf(`echo "$CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID" >> %[1]s; [ ! -e %[2]s/fail ] && [ $(wc -l < %[1]s) -ge 3 ] || { echo "cannot reach the runtime" >&2; exit 7; }`, runs, dir)
	k := harness.StartProcess(t, "keeper", "keeper", "-lease-file", path, "-fence-command", hook, "-state-dir", filepath.Join(dir, "state"))
	harness.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(k.Output(), "first look at the lease file: claims=2 to_fence_now=0") {
			return fmt.Errorf("keeper exp: two claims, none to fence got: %s", k.Output())
		}
		return nil
	})
	write(leasefile.Now() - 1) // the lease lapses
	harness.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(k.Output(), "fence command succeeded") {
			return fmt.Errorf("keeper exp: the fence command succeeded at last got: %s", k.Output())
		}
		return nil
	})
	out := k.Output()
	if n := strings.Count(out, "[ERROR] claimd-keeper: fence command failed: volume vf may still be written on this node; retrying"); n != 2 ||
		!strings.Contains(out, "exit status 7") || !strings.Contains(out, "cannot reach the runtime") {
		t.Fatalf("keeper log exp: two ERROR lines naming vf with the command's status and output got: %d\n%s", n, out)
	}
	if got := fxReadFile(t, runs); got != "a1 vf\na1 vf\na1 vf\n" {
		t.Fatalf("fence command exp: run for a1/vf only, three times got: %q", got)
	}

	// The lease lapses again (another FenceAt: the agent renewed in
	// between), and now the command always fails: the new lapse is fenced
	// again, and its retries stop once the agent renews.
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(fxReadFile(t, runs), "\n")
	write(leasefile.Now() - 1) // a new FenceAt: a new lapse
	harness.WaitFor(t, 20*time.Second, func() error {
		if n := strings.Count(fxReadFile(t, runs), "\n"); n <= before {
			return fmt.Errorf("a second lapse exp: fenced again got: %d runs (%d before)", n, before)
		}
		return nil
	})
	write(leasefile.Now() + int64(time.Hour))
	harness.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(k.Output(), "lease shown live again or claim gone before the fence command succeeded; no longer retrying: claim=a1/vf") {
			return fmt.Errorf("keeper exp: retries given up once the lease is live got: %s", k.Output())
		}
		return nil
	})
}
