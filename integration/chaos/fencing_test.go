package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// The fencing nemeses (issue 39 item 7; doc.go "Fencing"). Node A (w1)
// holds a short lease and the test's fence command; a real writer process
// on A writes to a single-node-writer volume; a fault hits A's agent, its
// network or its fence command; the volume is then claimed from node B
// (w2), which runs a writer of its own; A comes back. From both writers'
// records the overlap checker (overlap.go) must find no moment when both
// wrote, and the run must end with every claim released, on the servers
// and on both nodes.

const fcLease = 6 * time.Second

// fcScenario is one nemesis.
type fcScenario struct {
	name   string
	policy structs.NodeLostPolicy
	// hook is the fence command's mode while the fault is on.
	hook string
	// fault hits node A once A's writer writes. It returns what brings A
	// back, run once B has written.
	fault func(e *fcEnv, r *fcRun) (back func() error, err error)
	// free, when set, frees the volume for B (an operator's action);
	// otherwise the servers do, once A's lease has run out.
	free func(e *fcEnv, r *fcRun) error
	// after, when set, checks what only this nemesis can leave behind.
	after func(e *fcEnv, r *fcRun)
	// needsPause: the backend must be able to freeze an agent.
	needsPause bool
}

// fcEnv is the cluster the nemeses share, one after the other.
type fcEnv struct {
	t      *testing.T
	be     fcBackend
	admin  *api.Client
	hook   *fenceHook
	launch fwLauncher
	tool   string
	a, b   fcNode
}

// fcRun is one nemesis's volume, allocations and writers.
type fcRun struct {
	s              fcScenario
	vol            string
	allocA, allocB string
	wA, wB         *fwWriter
	// dataFile is the records file in the storage itself (the mounts are
	// symlinks to it).
	dataFile string
	// faultAt is when the fault began; bMoved when B's allocation ran.
	faultAt, bMoved time.Time
	// backAt is when node A was back (CLOCK_BOOTTIME, the records' clock;
	// backWall the wall clock then, the hook log's).
	backAt   int64
	backWall time.Time
}

// fcAgentArgs are the lease and fence command of both nodes' agents: B's
// writer is under the same rules as A's (claimd exec fences a
// fence-policy workload on a node without a lease at once).
func fcAgentArgs(h *fenceHook) []string {
	return []string{"-node-lease", fcLease.String(), "-fence-command", h.command()}
}

// fcRunAll runs every nemesis the backend and the launcher can, one after
// the other on one cluster.
func fcRunAll(t *testing.T, be fcBackend, h *fenceHook, tool string) {
	e := &fcEnv{t: t, be: be, admin: be.admin(), hook: h, tool: tool}
	e.a, e.b = be.nodes()
	e.launch = fwPickLauncher(t, be.claimd(t))
	t.Logf("fencing: writers tied to the lease by %q; node A %s (lease %s, fence command %s), node B %s",
		e.launch.name(), e.a.name(), fcLease, h.command(), e.b.name())
	e.launch.setup(t, be, h)
	for _, s := range fcScenarios() {
		if !e.launch.covers(s.hook) {
			t.Logf("fencing: %s skipped: the %s launcher cannot stop a writer when the fence command does not (mode %s)", s.name, e.launch.name(), s.hook)
			continue
		}
		t.Run(s.name, func(t *testing.T) { e.run(t, s) })
	}
}

func fcScenarios() []fcScenario {
	// A cut off; once B wrote, the network heals and the fence command
	// works again (the operator fixed it, or what made it fail passed):
	// the agent, which kept retrying it, can then finish the stop.
	isolate := func(e *fcEnv, r *fcRun) (func() error, error) {
		return func() error {
			e.hook.setMode(e.t, "kill")
			return e.be.heal()
		}, e.be.isolate(e.a)
	}
	// The agent retries a fence command that failed, not only the
	// unmount: it cannot know the writer stopped.
	retried := func(e *fcEnv, r *fcRun) {
		if n := e.hook.runs(r.allocA); n < 2 {
			e.t.Errorf("fence command that failed exp: retried got: %d run(s)", n)
		}
	}
	return []fcScenario{
		{
			// A graceful restart well within the lease: the workload goes
			// on, nothing moves; then an ordinary stop hands the volume on.
			name: "agent-restart", policy: structs.NodeLostFence, hook: "kill",
			fault: func(e *fcEnv, r *fcRun) (func() error, error) {
				if err := e.restartAgent(e.a.stop); err != nil {
					return nil, err
				}
				if !r.wA.alive() {
					return nil, fmt.Errorf("A's writer after a quick agent restart exp: running got: stopped (hook runs: %d)", e.hook.runs(r.allocA))
				}
				if st, desc := e.status(r.allocA); st != structs.AllocClientRunning {
					return nil, fmt.Errorf("A's allocation after a quick agent restart exp: running got: %s (%s)", st, desc)
				}
				return nil, nil
			},
			free: func(e *fcEnv, r *fcRun) error { return e.orderlyStop(r.wA, r.allocA) },
		},
		{
			// Paused past the lease: whatever stops the writer cannot be
			// the paused agent.
			name: "agent-sigstop", policy: structs.NodeLostFence, hook: "kill", needsPause: true,
			fault: func(e *fcEnv, r *fcRun) (func() error, error) {
				if err := e.a.pause(); err != nil {
					return nil, err
				}
				return e.a.resume, nil
			},
		},
		{
			// Crashed, restarted once the volume moved: the writer must
			// have stopped without the agent, and the restarted agent must
			// not let it go on.
			name: "agent-kill9", policy: structs.NodeLostFence, hook: "kill",
			fault: func(e *fcEnv, r *fcRun) (func() error, error) {
				return func() error { return e.restartAgent(nil) }, e.a.crash()
			},
		},
		{
			// Cut off, and the fence command fails.
			name: "fence-command-fails", policy: structs.NodeLostFence, hook: "fail", fault: isolate, after: retried,
		},
		{
			// Cut off, and the fence command never returns: it must be cut
			// short and leave no process behind.
			name: "fence-command-hangs", policy: structs.NodeLostFence, hook: "hang", fault: isolate,
			after: func(e *fcEnv, r *fcRun) {
				// The agent bounds the hook within the lease's fence
				// budget; what it started must be gone soon after.
				var left []int
				_ = nsPoll(fcLease, func() error {
					left = left[:0]
					for _, pid := range e.hook.hangPids() {
						if st := nsProcState(pid); st != 0 && st != 'Z' {
							left = append(left, pid)
						}
					}
					if len(left) > 0 {
						return fmt.Errorf("left")
					}
					return nil
				})
				if len(left) > 0 {
					e.t.Errorf("hanging fence command exp: its whole process group killed at the timeout got: %d of its `sleep 600` still running (pids %v)",
						len(left), left)
					for _, pid := range left {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				retried(e, r)
			},
		},
		{
			// Wait policy: the agent is killed and the writer frozen (the
			// node is down); the operator force-detaches the volume and B
			// takes it; the node returns. Its agent must stop the writer
			// before it reports ready, and only then does the writer thaw.
			name: "force-detach-return", policy: structs.NodeLostWait, hook: "kill",
			fault: func(e *fcEnv, r *fcRun) (func() error, error) {
				if err := r.wA.signal(syscall.SIGSTOP); err != nil {
					return nil, err
				}
				if err := e.a.crash(); err != nil {
					return nil, err
				}
				return func() error {
					if err := e.restartAgent(nil); err != nil {
						return err
					}
					// The returning agent stops the writer before the
					// node is ready: the servers decided, the node
					// complies. Thawed now, a writer still there writes.
					if r.wA.alive() {
						e.t.Errorf("A's frozen writer when node A was ready again exp: stopped by the returning agent got: still there (pid %d)", r.wA.pid())
					}
					// Gone already (ESRCH) is what the agent should do.
					if err := r.wA.signal(syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
						return err
					}
					return nil
				}, nil
			},
			free: func(e *fcEnv, r *fcRun) error {
				if err := nsPoll(nsTestWait+fcLease, func() error {
					n, _, err := e.admin.Node(nsTestCtx(e.t, 10*time.Second), e.a.id(), structs.QueryOptions{})
					if err != nil {
						return err
					}
					if n.Status != structs.NodeStatusDown {
						return fmt.Errorf("node A exp: down got: %s", n.Status)
					}
					return nil
				}); err != nil {
					return err
				}
				// What `claimd volume detach -force VOL NODE` calls.
				res, err := e.admin.DetachVolume(nsTestCtx(e.t, 30*time.Second), r.vol, e.a.id(), true)
				if err != nil {
					return fmt.Errorf("volume detach -force: %w", err)
				}
				e.t.Logf("fencing: operator forced %s off %s: released %v, forced %v", r.vol, e.a.name(), res.Released, res.Forced)
				return nil
			},
		},
	}
}

// run is one nemesis, start to end; every check that fails is an error,
// and the nemesis still ends with everything released.
func (e *fcEnv) run(t *testing.T, s fcScenario) {
	e.t = t
	r := &fcRun{s: s, vol: "fc-" + s.name, allocA: "fc-" + s.name + "-a", allocB: "fc-" + s.name + "-b"}
	t.Cleanup(func() { e.restore(r) })
	if s.needsPause && !e.a.canPause() {
		t.Skip("this backend cannot pause an agent")
	}
	// The nemesis before may have left A marked down (a node cut off
	// registers again after the heal): both nodes ready first.
	start := time.Now()
	for _, n := range []fcNode{e.a, e.b} {
		if err := nsPoll(nsTestWait+fcLease, func() error { return e.nodeReady(n) }); err != nil {
			t.Fatalf("before %s: %v", s.name, err)
		}
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("fencing: %s: waited %s for both nodes to be ready", s.name, waited.Round(10*time.Millisecond))
	}
	v := volume(r.vol, nsPluginID, structs.AccessModeSingleNodeWriter)
	v.NodeLost = s.policy
	if _, err := e.admin.RegisterVolumes(nsTestCtx(t, 30*time.Second), v); err != nil {
		t.Fatal(err)
	}
	e.place(r.allocA, r.vol, e.a)
	e.waitRunning(r.allocA, nsTestWait)
	mountA := e.mountPath(e.a, r.allocA, r.vol)
	e.hook.setMode(t, s.hook)
	r.wA = fwStart(t, e.be, e.launch, e.tool, e.hook, e.a, r.allocA, r.vol, mountA)
	dir, err := filepath.EvalSymlinks(mountA)
	if err != nil {
		t.Fatal(err)
	}
	r.dataFile = filepath.Join(dir, "records")

	r.faultAt = time.Now()
	back, err := s.fault(e, r)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	if s.free != nil {
		if err := s.free(e, r); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	e.place(r.allocB, r.vol, e.b)
	// The servers release a fence-policy claim once A's lease certainly
	// ran out; B's agent retries its claim with a backoff capped at 10 s.
	bound := structs.LeaseExpiry(fcLease) + 30*time.Second
	r.bMoved = e.waitRunning(r.allocB, bound)
	t.Logf("fencing: %s: the volume ran on B %s after the fault (lease %s)", s.name, r.bMoved.Sub(r.faultAt).Round(10*time.Millisecond), fcLease)
	r.wB = fwStart(t, e.be, e.launch, e.tool, e.hook, e.b, r.allocB, r.vol, e.mountPath(e.b, r.allocB, r.vol))
	// B writes for a second before A comes back.
	if err := nsPoll(nsTestWait, func() error {
		if n := r.wB.records(); n < 20 {
			return fmt.Errorf("B's writer exp: 20 records got: %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	aAliveWhileB := r.wA.alive()
	if back != nil {
		if err := back(); err != nil {
			t.Fatalf("%s: bringing node A back: %v", s.name, err)
		}
	}
	r.backAt, r.backWall = fwNow(), time.Now()
	// A's node is back: whatever is meant to stop A's writer has had its
	// chance. One that still runs is a second writer now.
	if err := r.wA.waitDead(10 * time.Second); err != nil {
		t.Errorf("A's writer exp: stopped by the time its node is back got: still running 10 s later (also while B wrote: %v)", aAliveWhileB)
		r.wA.kill()
	}
	// B wrote on after A's return, so an A that resumed shows in order.
	n := r.wB.records()
	_ = nsPoll(nsTestWait, func() error {
		if r.wB.records() < n+10 {
			return fmt.Errorf("B's writer exp: 10 more records")
		}
		return nil
	})
	e.endAll(r)
	e.checkOverlap(r)
	if s.after != nil {
		s.after(e, r)
	}
}

// endAll stops both allocations the ordinary way and requires every claim
// released: on the servers, and in both agents' held claims.
func (e *fcEnv) endAll(r *fcRun) {
	t := e.t
	if err := e.orderlyStop(r.wB, r.allocB); err != nil {
		t.Error(err)
	}
	r.wA.kill()
	if a, _, err := e.admin.Alloc(nsTestCtx(t, 10*time.Second), r.allocA, structs.QueryOptions{}); err != nil || !a.Terminal() {
		if _, err := e.admin.StopAllocs(nsTestCtx(t, 30*time.Second), r.allocA); err != nil {
			t.Errorf("stop %s: %v", r.allocA, err)
		}
	}
	if err := nsPoll(60*time.Second, func() error {
		v, _, err := e.admin.Volume(nsTestCtx(t, 10*time.Second), r.vol, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n := len(v.ReadClaims) + len(v.WriteClaims) + len(v.PastClaims); n > 0 {
			return fmt.Errorf("volume %s exp: no claim got: %d (write %v, past %v)", r.vol, n, mapKeys(v.WriteClaims), mapKeys(v.PastClaims))
		}
		for _, n := range []fcNode{e.a, e.b} {
			if _, ok := fcHeld(n, r.allocA, r.vol); ok {
				return fmt.Errorf("node %s exp: holds no claim on %s got: its held claims list it for %s", n.name(), r.vol, r.allocA)
			}
			if _, ok := fcHeld(n, r.allocB, r.vol); ok {
				return fmt.Errorf("node %s exp: holds no claim on %s got: its held claims list it for %s", n.name(), r.vol, r.allocB)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("every claim released at the end exp: within 60 s got: %v", err)
	}
}

// checkOverlap runs the overlap checker over both writers' records.
func (e *fcEnv) checkOverlap(r *fcRun) {
	t := e.t
	overlaps, counts, err := fwCheck(r.dataFile, r.wA.log, r.wB.log)
	if err != nil {
		t.Errorf("overlap check: %v", err)
		return
	}
	if counts[r.wA.id] == 0 || counts[r.wB.id] == 0 {
		t.Errorf("records exp: both writers' got: %v", counts)
	}
	for _, o := range overlaps {
		t.Errorf("single writer exp: no overlap got: %s; A's last write %s after node A was back (at %d ns, wall)", o,
			time.Duration(o.Until-r.backAt).Round(time.Millisecond), r.backWall.UnixNano())
	}
	all, _ := fwReadFile(r.wA.log)
	allB, _ := fwReadFile(r.wB.log)
	if len(all) > 0 && len(allB) > 0 && len(overlaps) == 0 {
		t.Logf("fencing: %s: no overlap; %d records from A, %d from B, A's last write ended %s before B's first began",
			r.s.name, counts[r.wA.id], counts[r.wB.id], time.Duration(allB[0].Start-all[len(all)-1].End).Round(time.Millisecond))
	}
}

// restore leaves node A as the next nemesis needs it, whatever failed:
// the network healed, the agent running, the hook killing, writers gone.
func (e *fcEnv) restore(r *fcRun) {
	t := e.t
	if err := e.be.heal(); err != nil {
		t.Errorf("restore: heal: %v", err)
	}
	if e.a.paused() {
		if err := e.a.resume(); err != nil {
			t.Errorf("restore: %v", err)
		}
	}
	if !e.a.running() {
		if err := e.restartAgent(nil); err != nil {
			t.Errorf("restore: %v", err)
		}
	}
	e.hook.setMode(t, "kill")
	// A nemesis that failed half way leaves no allocation behind either.
	_, _ = e.admin.StopAllocs(nsTestCtx(t, 30*time.Second), r.allocA, r.allocB)
	for _, w := range []*fwWriter{r.wA, r.wB} {
		if w != nil {
			if w.alive() && w.pid() != 0 {
				_ = w.signal(syscall.SIGCONT)
			}
			w.kill()
		}
	}
	if t.Failed() {
		t.Logf("fencing: %s: hook log:\n%s", r.s.name, readOr(filepath.Join(e.hook.dir, "hook.log")))
	}
}

// restartAgent stops A's agent with stop (nil: it is not running), starts
// it again and waits until it says it runs and the servers see the node
// ready.
func (e *fcEnv) restartAgent(stop func() error) error {
	if stop != nil {
		if err := stop(); err != nil {
			return err
		}
	}
	if err := e.a.start(); err != nil {
		return err
	}
	return nsPoll(nsTestWait+fcLease, func() error {
		if !e.a.running() {
			return fmt.Errorf("agent of %s exp: running got: exited after its restart", e.a.name())
		}
		if !e.a.ready() {
			return fmt.Errorf("agent of %s exp: running again got: not yet", e.a.name())
		}
		return e.nodeReady(e.a)
	})
}

// nodeReady: the servers see the node ready.
func (e *fcEnv) nodeReady(n fcNode) error {
	node, _, err := e.admin.Node(nsTestCtx(e.t, 10*time.Second), n.id(), structs.QueryOptions{})
	if err != nil {
		return err
	}
	if node.Status != structs.NodeStatusReady {
		return fmt.Errorf("node %s exp: ready got: %s", n.name(), node.Status)
	}
	return nil
}

// orderlyStop stops an allocation the way an orchestrator does: the
// workload first (unless its launcher stops it with the claim), then the
// allocation, whose release unmounts the volume.
func (e *fcEnv) orderlyStop(w *fwWriter, alloc string) error {
	if !e.launch.stopsWithClaim() {
		w.kill()
	}
	if _, err := e.admin.StopAllocs(nsTestCtx(e.t, 30*time.Second), alloc); err != nil {
		return fmt.Errorf("stop %s: %w", alloc, err)
	}
	if err := w.waitDead(nsTestWait); err != nil {
		return fmt.Errorf("ordinary stop of %s: %w", alloc, err)
	}
	return nil
}

func (e *fcEnv) place(alloc, vol string, n fcNode) {
	e.t.Helper()
	a := &structs.Alloc{ID: alloc, NodeID: n.id(), Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}}
	if _, err := e.admin.PlaceAllocs(nsTestCtx(e.t, 30*time.Second), a); err != nil {
		e.t.Fatal(err)
	}
}

func (e *fcEnv) status(alloc string) (structs.AllocClientStatus, string) {
	a, _, err := e.admin.Alloc(nsTestCtx(e.t, 10*time.Second), alloc, structs.QueryOptions{})
	if err != nil {
		return "", err.Error()
	}
	return a.ClientStatus, a.ClientDescription
}

func (e *fcEnv) waitRunning(alloc string, within time.Duration) time.Time {
	e.t.Helper()
	if err := nsPoll(within, func() error {
		if st, desc := e.status(alloc); st != structs.AllocClientRunning {
			return fmt.Errorf("%s exp: running got: %s (%s)", alloc, st, desc)
		}
		return nil
	}); err != nil {
		e.t.Fatalf("%v", err)
	}
	return time.Now()
}

// fcHeld finds a claim in a node's held-claims record and returns its
// mount path ("" while mounting).
func fcHeld(n fcNode, alloc, vol string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(n.dataDir(), "held-claims.json"))
	if err != nil {
		return "", false
	}
	var held []struct {
		AllocID   string `json:"alloc_id"`
		VolumeID  string `json:"volume_id"`
		MountPath string `json:"mount_path"`
	}
	_ = json.Unmarshal(b, &held)
	for _, h := range held {
		if h.AllocID == alloc && h.VolumeID == vol {
			return h.MountPath, true
		}
	}
	return "", false
}

// mountPath waits until n's agent recorded where it mounted vol for alloc.
func (e *fcEnv) mountPath(n fcNode, alloc, vol string) string {
	e.t.Helper()
	var path string
	if err := nsPoll(nsTestWait, func() error {
		p, ok := fcHeld(n, alloc, vol)
		if !ok || p == "" {
			return fmt.Errorf("held claim %s/%s on %s exp: mounted got: not yet", alloc, vol, n.name())
		}
		path = p
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return path
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func readOr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
