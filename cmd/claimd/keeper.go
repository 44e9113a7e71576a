package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/internal/fencecmd"
	"github.com/claimd/claimd/internal/fencewatch"
	"github.com/claimd/claimd/internal/leasefile"
)

// defaultKeeperStateDir is the keeper unit's StateDirectory.
const defaultKeeperStateDir = "/var/lib/claimd-keeper"

// Retries of a failed fence command: quick at first (the deadline is
// near or past), then every keeperRetryMax.
const (
	keeperRetryMin = 500 * time.Millisecond
	keeperRetryMax = 5 * time.Second
)

// runKeeper holds the lease deadline for workloads claimd does not start
// (containers, services): it outlives the agent (a unit of its own),
// watches the lease file the agent publishes, and runs the fence command
// for every fence-policy claim whose lease cannot be shown live, until it
// succeeds, once per claim per lapse. The lapses it fenced are kept in
// its state dir: restarted, it does not redo them, and it fences at once
// whatever lapsed while it was away.
func runKeeper(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("keeper", stderr)
	var lf leaseFileFlags
	lf.register(fs)
	command := fs.String("fence-command", "", "shell command that stops what writes through a volume (required; env CLAIMD_ALLOC_ID, CLAIMD_VOLUME_ID, CLAIMD_MOUNT_PATH, CLAIMD_NODE_ID, as the agent's -fence-command)")
	timeout := fs.Duration("fence-timeout", 0, "the longest one run of the fence command may take; its process group is killed then and it is run again (default: the lease file's fence window, Deadline - FenceAt, at least "+fencewatch.MinFenceTimeout.String()+")")
	stateDir := fs.String("state-dir", defaultKeeperStateDir, "where the keeper records the fences it has done")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
	logJSON := fs.Bool("log-json", false, "log JSON lines")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	path, err := lf.path()
	level := hclog.LevelFromString(*logLevel)
	switch {
	case err != nil:
		return fail(stderr, "%v", err)
	case fs.NArg() != 0:
		return fail(stderr, "unexpected argument %q\nusage: claimd keeper [-data-dir DIR | -lease-file PATH] -fence-command CMD [-fence-timeout D] [-state-dir DIR]", fs.Arg(0))
	case *command == "":
		return fail(stderr, "-fence-command: required (the shell command that stops what writes through a volume)")
	case *timeout < 0:
		return fail(stderr, "-fence-timeout: %s is negative", *timeout)
	case *stateDir == "":
		return fail(stderr, "-state-dir: must not be empty")
	case level == hclog.NoLevel:
		return fail(stderr, "-log-level: %q is not one of trace, debug, info, warn, error", *logLevel)
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		return fail(stderr, "-state-dir: %v", err)
	}
	state, err := fencewatch.LoadKeeperState(*stateDir)
	if err != nil {
		return fail(stderr, "-state-dir: %v", err)
	}
	k := &keeper{
		path: path, stateDir: *stateDir, command: *command, timeout: *timeout, bootID: leasefile.BootID(),
		log:     hclog.New(&hclog.LoggerOptions{Name: "claimd-keeper", Level: level, JSONFormat: *logJSON, Output: stderr}),
		state:   state,
		running: map[string]*keeperFence{},
		results: make(chan keeperResult, 16),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	k.run(ctx)
	return 0
}

type keeper struct {
	path, stateDir, command string
	timeout                 time.Duration
	bootID                  string
	log                     hclog.Logger

	// Only run's goroutine touches these.
	state    *fencewatch.KeeperState
	running  map[string]*keeperFence // claim key → its fence in progress
	results  chan keeperResult
	readFail string // the last read error logged
	looked   bool   // the first look is done
}

// keeperFence is one claim's fence for one lapse, retried until done.
type keeperFence struct {
	lapse  string
	cancel context.CancelFunc
}

type keeperResult struct {
	key, lapse string
}

func (k *keeper) run(ctx context.Context) {
	k.log.Info("keeping the node lease's deadline", "lease_file", k.path, "state_dir", k.stateDir)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(fencewatch.PollInterval)
	defer tick.Stop()
	for {
		k.look(ctx, &wg)
		select {
		case <-ctx.Done():
			for _, r := range k.running {
				r.cancel()
			}
			k.log.Info("stopping")
			return
		case res := <-k.results:
			k.finished(res)
		case <-tick.C:
		}
	}
}

// look reads the file once and starts the fences it calls for.
func (k *keeper) look(ctx context.Context, wg *sync.WaitGroup) {
	f, err := leasefile.Read(k.path)
	switch {
	case err != nil && err.Error() != k.readFail:
		k.readFail = err.Error()
		if k.state.Last != nil {
			k.log.Warn("the lease file cannot be read: the lease cannot be shown live; fence-policy claims last listed there are fenced", "error", err)
		} else {
			k.log.Warn("the lease file cannot be read (no claims known yet)", "error", err)
		}
	case err == nil:
		k.readFail = ""
	}
	if k.state.Observe(f) {
		k.save()
	}
	toFence, lapse := k.state.ToFence(err == nil, leasefile.Now(), k.bootID)
	if !k.looked {
		k.looked = true
		k.firstLook(len(toFence), lapse)
	}
	want := map[string]bool{}
	for _, c := range toFence {
		key := fencewatch.Key(c)
		want[key] = true
		if r, ok := k.running[key]; ok && r.lapse == lapse {
			continue
		}
		k.start(ctx, wg, c, lapse)
	}
	// A fence still failing when the lease is shown live again (the agent
	// renewed) or the claim is gone from the file is given up: the agent
	// holds the claim again, or has unmounted it.
	for key, r := range k.running {
		if !want[key] {
			k.log.Warn("lease shown live again or claim gone before the fence command succeeded; no longer retrying", "claim", key)
			r.cancel()
			delete(k.running, key)
		}
	}
}

// firstLook says what the keeper found on its start: the claims it
// fences at once, and those whose fence for this lapse it had already
// done before a restart (not redone).
func (k *keeper) firstLook(toFence int, lapse string) {
	claims, before := 0, 0
	if k.state.Last != nil {
		claims = len(k.state.Last.Claims)
		for _, c := range k.state.Last.Claims {
			if c.Fenced() && lapse != "" && k.state.Done[fencewatch.Key(c)] == lapse {
				before++
			}
		}
	}
	k.log.Info("first look at the lease file", "claims", claims, "to_fence_now", toFence, "fenced_before", before)
}

// start runs the fence command for c in the background until it succeeds.
func (k *keeper) start(ctx context.Context, wg *sync.WaitGroup, c leasefile.Claim, lapse string) {
	if r, ok := k.running[fencewatch.Key(c)]; ok {
		r.cancel()
	}
	fctx, cancel := context.WithCancel(ctx)
	k.running[fencewatch.Key(c)] = &keeperFence{lapse: lapse, cancel: cancel}
	nodeID := ""
	if k.state.Last != nil {
		nodeID = k.state.Last.NodeID
	}
	timeout := fencewatch.FenceTimeout(k.state.Last, k.timeout)
	env := []string{"CLAIMD_ALLOC_ID=" + c.AllocID, "CLAIMD_VOLUME_ID=" + c.VolumeID,
		"CLAIMD_MOUNT_PATH=" + c.MountPath, "CLAIMD_NODE_ID=" + nodeID}
	log := k.log.With("alloc", c.AllocID, "volume", c.VolumeID, "mount_path", c.MountPath)
	log.Warn("node lease cannot be shown live: running the fence command", "lapse", lapse, "timeout", timeout)
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait := keeperRetryMin
		for attempt := 1; ; attempt++ {
			began := time.Now()
			err := fencecmd.Run(fctx, k.command, env, timeout)
			if fctx.Err() != nil {
				return
			}
			if err == nil {
				log.Info("fence command succeeded", "attempt", attempt, "took", time.Since(began).Round(time.Millisecond))
				select {
				case k.results <- keeperResult{key: fencewatch.Key(c), lapse: lapse}:
				case <-fctx.Done():
				}
				return
			}
			log.Error(fmt.Sprintf("fence command failed: volume %s may still be written on this node; retrying", c.VolumeID),
				"attempt", attempt, "retry_in", wait, "error", err)
			select {
			case <-fctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, keeperRetryMax)
		}
	}()
}

// finished records a fence done for its lapse.
func (k *keeper) finished(res keeperResult) {
	if r, ok := k.running[res.key]; ok && r.lapse == res.lapse {
		delete(k.running, res.key)
	}
	k.state.Done[res.key] = res.lapse
	k.save()
}

func (k *keeper) save() {
	if err := k.state.Save(k.stateDir); err != nil {
		// Not fatal: the worst is a fence run again after a restart.
		k.log.Error("could not record the keeper's state; a restart may run fence commands again", "state_dir", k.stateDir, "error", err)
	}
}
