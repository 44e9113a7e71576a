package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// FlagCheckTimeout bounds the linearizability checker.
var FlagCheckTimeout = flag.Duration("chaos.check-timeout", 0, "bound on the linearizability check (0 = 60s, or a quarter of -chaos.duration if longer)")

// checkTimeout is -chaos.check-timeout, or by default a minute or a
// quarter of the run's duration, whichever is longer.
func checkTimeout(duration time.Duration) time.Duration {
	if *FlagCheckTimeout > 0 {
		return *FlagCheckTimeout
	}
	return max(60*time.Second, duration/4)
}

// digestsAfterFault bounds the comparison of the servers' states after
// each fault heals (compareDigests): a restarted server has this long to
// catch up and be seen at a state index the others were seen at; it is
// not a failure if it is not (the check at the end requires it).
const digestsAfterFault = 10 * time.Second

// Options shape one chaos run. Zero values take the defaults shown.
type Options struct {
	// Duration of the fault schedule; 0 = the short CI schedule (every
	// nemesis once, about 5 s each). -chaos.duration overrides it.
	Duration time.Duration
	// Seed of the schedule and the workload; 0 = -chaos.seed, else random.
	// It is printed so that a failing schedule can be replayed.
	Seed int64
	// Volumes of the linearizability workload (default 10, spread over
	// every access mode); callers claim, release and read them.
	Volumes int
	// Callers of the linearizability workload (default 16).
	Callers int
	// MountRunners place allocations the agents run for real on a
	// separate pool of one volume per access mode (default 3).
	MountRunners int
	// OutDir receives a failing run's history, visualisation and logs
	// (default -chaos.out, else a new directory under the temp dir, kept).
	// When it is set, a passing run saves them too.
	OutDir string
	// Only, if set, restricts the schedule to these nemeses (names as in
	// nemeses()); for focused runs and regression tests.
	Only []string
	// Settle is the fault-free time after the schedule before the workload
	// stops (default 2 s).
	Settle time.Duration
	// Modes, if set, are the access modes of the linearizability volumes
	// (round robin); default every mode.
	Modes []structs.AccessMode
}

func (o *Options) defaults() {
	if *FlagDuration > 0 {
		o.Duration = *FlagDuration
	}
	if o.Seed == 0 {
		o.Seed = *FlagSeed
	}
	if o.Seed == 0 {
		o.Seed = rand.Int64N(1<<53) + 1
	}
	if o.Volumes <= 0 {
		o.Volumes = 10
	}
	if o.Callers <= 0 {
		o.Callers = 16
	}
	if o.MountRunners <= 0 {
		o.MountRunners = 3
	}
	if o.OutDir == "" {
		o.OutDir = *FlagOut
	}
	if o.Settle <= 0 {
		o.Settle = 2 * time.Second
	}
}

var abbrev = map[structs.AccessMode]string{
	structs.AccessModeSingleNodeReader:       "snr",
	structs.AccessModeSingleNodeWriter:       "snw",
	structs.AccessModeMultiNodeReader:        "mnr",
	structs.AccessModeMultiNodeSingleWriter:  "mnsw",
	structs.AccessModeMultiNodeMultiWriter:   "mnmw",
	structs.AccessModeSingleNodeSingleWriter: "snsw",
	structs.AccessModeSingleNodeMultiWriter:  "snmw",
}

// linModes are the access modes of the linearizability volumes: every mode
// but single-node-multi-writer, whose rule depends on the claiming node,
// which the model (one state per volume: its live claims by allocation)
// does not track. That mode runs in the mount runners, under the audit
// checks (one node at a time).
var linModes = func() []structs.AccessMode {
	var out []structs.AccessMode
	for _, m := range structs.AccessModes {
		if m != structs.AccessModeSingleNodeMultiWriter {
			out = append(out, m)
		}
	}
	return out
}()

func volume(id, plugin string, m structs.AccessMode) *structs.Volume {
	return &structs.Volume{ID: id, Name: id, ExternalID: "ext-" + id, PluginID: plugin,
		AccessMode: m, AttachmentMode: structs.AttachmentModeFilesystem}
}

// Result is what a run observed, for the report.
type Result struct {
	Seed     int64
	Ops      []Op
	ByFault  map[string]Tally
	Mounts   string
	Notes    map[string]int
	Problems []string
	OutDir   string
	Elapsed  time.Duration
}

// Run drives c through the fault schedule under the workload and checks
// everything docs/architecture.md promises (S1-S8, L1, linearizability).
// Every failed check is reported with t.Errorf; a failing run saves the
// history, the porcupine visualisation and every log to one folder and
// prints its path. It must be called from the test goroutine.
func Run(t *testing.T, c Cluster, opts Options) *Result {
	t.Helper()
	opts.defaults()
	defer boundCheckerMemory()()
	began := time.Now()
	tc := newTracked(c)
	c = tc
	t.Logf("chaos seed %d (replay: -chaos.seed=%d)", opts.Seed, opts.Seed)
	// Also on stderr at once: go test prints a test's t.Logf lines when it
	// ends, and drops them when the binary times out, which would lose
	// the seed of a run that hangs.
	replay := fmt.Sprintf("-run '^%s$' -chaos.seed=%d", t.Name(), opts.Seed)
	if opts.Duration > 0 {
		replay += " -chaos.duration=" + opts.Duration.String()
	}
	fmt.Fprintf(os.Stderr, "=== chaos %s: seed %d (replay: go test -race %s ./integration/chaos/)\n", t.Name(), opts.Seed, replay)
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x5eed))
	res := &Result{Seed: opts.Seed, Notes: map[string]int{}}

	admin := c.Client(c.Servers()[0])
	defer admin.Close()
	w, err := setup(t, c, admin, opts)
	if err != nil {
		t.Fatalf("chaos setup: %v", err)
	}

	short := opts.Duration <= 0
	plan := schedule(rng, opts.Duration, short)
	if len(opts.Only) > 0 {
		var kept []scheduled
		for _, s := range plan {
			for _, name := range opts.Only {
				if s.n.name == name {
					kept = append(kept, s)
				}
			}
		}
		plan = kept
	}
	var names []string
	for _, s := range plan {
		names = append(names, s.n.name)
	}
	t.Logf("chaos schedule (%d faults): %s", len(plan), strings.Join(names, ", "))

	clients := w.start(opts.Seed, opts.Callers, opts.MountRunners)
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// Warm up fault-free, then the faults one after the other.
	time.Sleep(1500 * time.Millisecond)
	observer := c.Client(c.Servers()[len(c.Servers())-1])
	defer observer.Close()
	env := &nemesisEnv{c: c, rng: rng, notes: res.Notes, observe: func() clientAPI { return observer },
		tamper: newTamperer(tc.Cluster, w)}
	for _, s := range plan {
		w.h.SetNemesis(s.n.name, "")
		undo, desc, err := s.n.start(env)
		if err != nil {
			fail("nemesis %s: start: %v", s.n.name, err)
			if undo != nil {
				_ = undo()
			}
			w.h.SetNemesis("none", "")
			continue
		}
		w.h.SetDesc(desc)
		t.Logf("fault on: %s (%s) for %s", s.n.name, desc, s.on.Round(time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), s.on)
		if s.n.during != nil {
			s.n.during(ctx, env)
		}
		<-ctx.Done()
		cancel()
		if err := undo(); err != nil {
			fail("nemesis %s: undo: %v", s.n.name, err)
		}
		w.h.SetNemesis("none", "")
		// Recovery: a leader again, then a little fault-free time, in
		// which every server's state is compared (S2) under the load.
		healed := time.Now()
		if _, err := env.leader(); err != nil {
			fail("after %s healed: %v", s.n.name, err)
		}
		r := compareDigests(c, digestsAfterFault, false)
		switch {
		case r.Violation != "":
			fail("S2 after fault %s (%s): %s", s.n.name, desc, r.Violation)
		case r.Inconclusive != "":
			res.Notes["faults after which not every server's state was compared"]++
			t.Logf("S2 after fault %s: not compared: %s", s.n.name, r.Inconclusive)
		case r.Links != "":
			res.Notes["faults after which every server's state was compared"]++
			t.Logf("S2 after fault %s: every server's state compared, by pairs: %s (%d digests, %s after the heal)",
				s.n.name, r.Links, r.Rounds, time.Since(healed).Round(time.Millisecond))
		default:
			res.Notes["faults after which every server's state was compared"]++
			t.Logf("S2 after fault %s: every server has the same state at index %d (%d digests, %s after the heal)",
				s.n.name, r.Index, r.Rounds, time.Since(healed).Round(time.Millisecond))
		}
		time.Sleep(s.off - time.Since(healed))
	}

	// Everything heals; the workload runs fault-free a moment and stops.
	if err := healAll(tc); err != nil {
		fail("heal: %v", err)
	}
	if _, err := env.leader(); err != nil {
		fail("after the schedule: %v", err)
	}
	time.Sleep(opts.Settle)
	if err := w.stop(90 * time.Second); err != nil {
		fail("%v", err)
	}

	// Final reads, then the synthetic drops for allocs that ended lost or
	// failed (read after the final reads, so every drop that could have
	// touched them is included).
	finalReads(w, admin)
	addDrops(t, w, admin)
	ops := w.h.Ops()
	res.Ops = ops
	res.ByFault = TallyByNemesis(ops)
	res.Mounts = w.mountStats.String()

	timeout := checkTimeout(opts.Duration)
	t.Logf("checker memory before the linearizability check: %s", memoryNote())
	checkStart := time.Now()
	lin := checkLinearizable(ops, opts.Callers, timeout)
	t.Logf("linearizability check of %d ops took %s", len(ops), time.Since(checkStart).Round(time.Millisecond))
	releaseMemory()
	t.Logf("checker memory after the linearizability check: %s", memoryNote())
	if lin.Err != nil {
		fail("%v", lin.Err)
	}
	if len(lin.ByParts) > 0 {
		// Not a failure: the split is sound, only weaker (see splitByAllocation).
		t.Logf("linearizability: checked by allocation, the whole history not finishing within %s: %s",
			timeout/2, strings.Join(lin.ByParts, ", "))
	}
	res.Notes["volumes checked by allocation (whole check too slow)"] = len(lin.ByParts)
	problems = append(problems, checkAcknowledged(ops)...)
	if err := checkNoDenials(ops); err != nil {
		fail("%v", err)
	}
	res.Notes["first claims answered as not new (a retried call)"] = notNewFirstClaims(ops)
	t.Logf("checker memory after the acknowledged-writes check: %s", memoryNote())

	// Release everything and check liveness, state and the plugins' view.
	if err := stopAll(w, admin); err != nil {
		fail("stopping every allocation: %v", err)
	}
	releasedErr := waitReleased(admin, 60*time.Second)
	if releasedErr != nil {
		fail("%v", releasedErr)
	}
	if err := checkDigests(c, 30*time.Second); err != nil {
		fail("%v", err)
	}
	// What the tamper nemesis left goes, and the storage itself must then
	// hold nothing (what claimd attached it detached).
	if releasedErr == nil {
		if err := env.tamper.heal(nil, true); err != nil {
			fail("removing the tamper nemesis's orphans: %v", err)
		}
		if err := env.tamper.checkStorageEmpty(30 * time.Second); err != nil {
			fail("%v", err)
		}
		res.Notes["orphans repaired by claimd's reconciler"] = countRepairs(admin)
	}
	t.Logf("checker memory after the release of everything and the digests: %s", memoryNote())
	if audits, err := readAudits(c); err != nil {
		fail("%v", err)
	} else {
		in := w.auditInput()
		in.tampers = env.tamper.Events()
		in.released = releasedErr == nil
		problems = append(problems, checkAudit(in, audits)...)
		calls := 0
		for _, e := range audits {
			calls += len(e)
		}
		res.Notes["plugin calls audited"] = calls
	}
	t.Logf("checker memory after the audit of every plugin call: %s", memoryNote())
	if err := c.Health(); err != nil {
		fail("health: %v", err)
	}

	res.Elapsed = time.Since(began)
	t.Logf("operations by fault:\n%s", FormatTally(res.ByFault, OverlapByNemesis(ops, w.h.Spans())))
	t.Logf("mount runners: %s", res.Mounts)
	t.Logf("notes: %v", res.Notes)
	res.Problems = problems
	if len(problems) > 0 || opts.OutDir != "" {
		// A failing run always leaves its evidence; a passing one only
		// when an out dir was asked for.
		dir := opts.OutDir
		if dir == "" {
			dir, _ = os.MkdirTemp("", "claimd-chaos-")
		}
		dir = filepath.Join(dir, fmt.Sprintf("%s-seed-%d", sanitize(t.Name()), opts.Seed))
		res.OutDir = dir
		for _, e := range saveFailure(dir, c, w.h, lin.Visualise, timeout, map[string]any{"seed": opts.Seed, "problems": problems, "mounts": res.Mounts}) {
			t.Logf("saving the failure: %s", e)
		}
		for _, p := range problems {
			t.Errorf("%s", p)
		}
		if len(problems) > 0 {
			t.Errorf("chaos run failed (seed %d): history, visualisation and logs in %s", opts.Seed, dir)
		} else {
			t.Logf("history, visualisation and logs in %s", dir)
		}
	}
	return res
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

// setup registers the volumes and waits for the plugin to be usable.
func setup(t *testing.T, c Cluster, admin *api.Client, opts Options) (*workload, error) {
	w := &workload{c: c, h: NewHistory(), workers: c.Workers()}
	vols := []*structs.Volume{volume(parkingVolume, parkingPlugin, structs.AccessModeMultiNodeMultiWriter)}
	modes := opts.Modes
	if len(modes) == 0 {
		modes = linModes
	}
	for i := 0; i < opts.Volumes; i++ {
		m := modes[i%len(modes)]
		id := fmt.Sprintf("lin-%s-%d", abbrev[m], i)
		w.lin = append(w.lin, volSpec{ID: id, Access: m})
		vols = append(vols, volume(id, PluginID, m))
	}
	for _, m := range structs.AccessModes {
		id := "mnt-" + abbrev[m]
		w.mounts = append(w.mounts, volSpec{ID: id, Access: m})
		v := volume(id, PluginID, m)
		// Orphans the tamper nemesis adds are repaired only under fence;
		// without a node lease on the agents (or with one longer than
		// any fault) it releases as wait does.
		v.NodeLost = structs.NodeLostFence
		vols = append(vols, v)
	}
	if err := retry(60*time.Second, func(ctx context.Context) error {
		_, err := admin.RegisterVolumes(ctx, vols...)
		return err
	}); err != nil {
		return nil, fmt.Errorf("register volumes: %w", err)
	}
	err := retry(60*time.Second, func(ctx context.Context) error {
		p, _, err := admin.Plugin(ctx, PluginID, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p == nil || p.NodesHealthy != len(w.workers) || p.ControllersHealthy < 1 {
			return fmt.Errorf("plugin %s exp: %d healthy nodes and a healthy controller got: %+v", PluginID, len(w.workers), p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The plugins name nodes by their own IDs; the audit check needs them.
	w.extNode = map[string]string{}
	for _, wk := range w.workers {
		err := retry(30*time.Second, func(ctx context.Context) error {
			n, _, err := admin.Node(ctx, wk.NodeID, structs.QueryOptions{})
			if err != nil {
				return err
			}
			fp := n.CSINodePlugins[PluginID]
			if fp == nil || fp.ExternalNodeID == "" {
				return fmt.Errorf("node %s has no %s fingerprint", wk.Name, PluginID)
			}
			w.extNode[wk.Name] = fp.ExternalNodeID
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

func (w *workload) auditInput() auditInput {
	in := auditInput{access: map[string]structs.AccessMode{}, linExt: map[string]bool{}}
	for _, v := range w.lin {
		in.access["ext-"+v.ID] = v.Access
		in.linExt["ext-"+v.ID] = true
	}
	for _, v := range w.mounts {
		in.access["ext-"+v.ID] = v.Access
	}
	return in
}

// countRepairs counts the orphan attachments claimd's reconciler detached
// (Volume.Repairs), for the notes.
func countRepairs(admin *api.Client) int {
	var n int
	_ = retry(10*time.Second, func(ctx context.Context) error {
		vols, _, err := admin.Volumes(ctx, "", structs.QueryOptions{})
		n = 0
		for _, v := range vols {
			n += len(v.Repairs)
		}
		return err
	})
	return n
}

// retry runs fn until it succeeds or the time is up.
func retry(d time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// healAll undoes every fault still in force, whatever the schedule left.
func healAll(c *tracked) error {
	c.mu.Lock()
	killed, paused, plugins := keys(c.killed), keys(c.paused), keys(c.plugins)
	c.mu.Unlock()
	errs := []error{c.Heal(), c.SetLatency(0)}
	for _, s := range paused {
		errs = append(errs, c.Resume(s))
	}
	for _, s := range killed {
		errs = append(errs, c.Restart(s))
	}
	for _, w := range plugins {
		errs = append(errs, c.RestartPlugin(w))
	}
	return errors.Join(errs...)
}

// tracked remembers the process faults in force, so that healing undoes
// exactly those (a backend's Restart of a running server need not be a
// no-op).
type tracked struct {
	Cluster
	mu                      sync.Mutex
	killed, paused, plugins map[string]bool
}

func newTracked(c Cluster) *tracked {
	return &tracked{Cluster: c, killed: map[string]bool{}, paused: map[string]bool{}, plugins: map[string]bool{}}
}

func (c *tracked) note(m map[string]bool, k string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		m[k] = true
	} else {
		delete(m, k)
	}
}

func (c *tracked) Kill(s string) error {
	c.note(c.killed, s, true)
	return c.Cluster.Kill(s)
}

func (c *tracked) Restart(s string) error {
	err := c.Cluster.Restart(s)
	if err == nil {
		c.note(c.killed, s, false)
	}
	return err
}

// PauseAtStorageCall passes the nemesis through to a backend with fault
// points (errNoFaultPoints otherwise), and remembers a server it stopped.
func (c *tracked) PauseAtStorageCall(s string, wait time.Duration) (bool, error) {
	sp, ok := c.Cluster.(storagePauser)
	if !ok {
		return false, errNoFaultPoints
	}
	stopped, err := sp.PauseAtStorageCall(s, wait)
	if stopped {
		c.note(c.paused, s, true)
	}
	return stopped, err
}

func (c *tracked) Pause(s string) error {
	c.note(c.paused, s, true)
	return c.Cluster.Pause(s)
}

func (c *tracked) Resume(s string) error {
	err := c.Cluster.Resume(s)
	if err == nil {
		c.note(c.paused, s, false)
	}
	return err
}

func (c *tracked) KillPlugin(w string) error {
	c.note(c.plugins, w, true)
	return c.Cluster.KillPlugin(w)
}

func (c *tracked) RestartPlugin(w string) error {
	err := c.Cluster.RestartPlugin(w)
	if err == nil {
		c.note(c.plugins, w, false)
	}
	return err
}

// finalReads reads every workload volume once the faults have healed; they
// end the history and are what S8 compares with.
func finalReads(w *workload, admin *api.Client) {
	for _, v := range w.lin {
		for attempt := 0; attempt < 20; attempt++ {
			op := w.h.Begin(&Op{Caller: 0, Kind: OpRead, Volume: v.ID, Access: v.Access, Final: true})
			ctx, cancel := opCtx()
			vol, _, err := admin.Volume(ctx, v.ID, structs.QueryOptions{})
			cancel()
			if err == nil && vol != nil {
				w.h.End(op, OK, nil, func(o *Op) { o.Live = liveOf(vol) })
				break
			}
			if err == nil {
				err = errors.New("no volume in the reply")
			}
			w.h.End(op, Unknown, err)
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// addDrops records, for every workload alloc that ended lost (its node was
// marked down) or failed, a release that may have landed any time after
// it was placed: the workload did not ask for it and cannot know when.
func addDrops(t *testing.T, w *workload, admin *api.Client) {
	var allocs []*structs.Alloc
	if err := retry(30*time.Second, func(ctx context.Context) error {
		var err error
		allocs, _, err = admin.Allocs(ctx, "", structs.QueryOptions{})
		return err
	}); err != nil {
		t.Errorf("listing allocations for the drops: %v", err)
		return
	}
	placedAt := map[string]*Op{}
	for _, o := range w.h.Ops() {
		if o.Kind == OpClaim {
			if _, ok := placedAt[o.Alloc]; !ok {
				o := o
				placedAt[o.Alloc] = &o
			}
		}
	}
	reasons := map[string]int{}
	for _, a := range allocs {
		first := placedAt[a.ID]
		if first == nil || (a.ClientStatus != structs.AllocClientLost && a.ClientStatus != structs.AllocClientFailed) {
			continue
		}
		reasons[string(a.ClientStatus)+": "+allocIDs.ReplaceAllString(firstLine(a.ClientDescription), `alloc "…"`)]++
		w.h.Add(&Op{Kind: OpDrop, Volume: first.Volume, Access: first.Access, Alloc: a.ID, Worker: first.Worker,
			Call: first.Call, Return: Inf, Outcome: Unknown, Code: string(a.ClientStatus), Err: a.ClientDescription})
	}
	if len(reasons) > 0 {
		var lines []string
		for r, n := range reasons {
			lines = append(lines, fmt.Sprintf("%dx %s", n, r))
		}
		sort.Strings(lines)
		t.Logf("workload allocations released without being asked: %s", strings.Join(lines, "; "))
	}
}

var allocIDs = regexp.MustCompile(`alloc "[^"]*"`)

// stopAll stops every allocation the run placed that is still running.
func stopAll(w *workload, admin *api.Client) error {
	var allocs []*structs.Alloc
	if err := retry(30*time.Second, func(ctx context.Context) error {
		var err error
		allocs, _, err = admin.Allocs(ctx, "", structs.QueryOptions{})
		return err
	}); err != nil {
		return err
	}
	var ids []string
	for _, a := range allocs {
		if !a.Terminal() && a.DesiredStatus != structs.AllocDesiredStop {
			ids = append(ids, a.ID)
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), 200)
		batch := ids[:n]
		if err := retry(30*time.Second, func(ctx context.Context) error {
			_, err := admin.StopAllocs(ctx, batch...)
			return err
		}); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// checkNoDenials fails a run in which the servers refused any workload
// call for lack of permission. The workload counts such a refusal as a
// definite "not applied", which the checkers accept, so a token missing a
// capability would otherwise pass as a run where, say, every claim was
// refused.
func checkNoDenials(ops []Op) error {
	byKind := map[OpKind]int{}
	n := 0
	var first string
	for _, o := range ops {
		if o.Code != string(structs.CodePermissionDenied) {
			continue
		}
		if n == 0 {
			first = o.Err
		}
		n++
		byKind[o.Kind]++
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("workload calls refused for lack of permission exp: 0 got: %d %v (first: %s)", n, byKind, first)
}

// notNewFirstClaims counts identities whose first acknowledged claim said
// New=false: nothing else claims for them, so the server must have found a
// claim it took earlier for the same request (a retried call whose first
// attempt was applied although it answered as not applied).
func notNewFirstClaims(ops []Op) int {
	seen := map[string]bool{}
	n := 0
	for _, o := range ops {
		if o.Kind != OpClaim || o.Synthetic {
			continue
		}
		first := !seen[o.Alloc]
		seen[o.Alloc] = true
		if first && o.Outcome == OK && !o.New {
			n++
		}
	}
	return n
}
