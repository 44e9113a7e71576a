package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/claimd/claimd/structs"
)

// Run drives the cluster in cfg.Mode once for every target and callers
// value, handing each result to emit as soon as it is known. Before it
// returns it waits for the servers to free every claim it released, then
// deregisters what it created (unless cfg.KeepState).
func Run(ctx context.Context, cfg Config, emit func(*Result)) (err error) {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	c, err := discover(ctx, &cfg)
	if err != nil {
		return err
	}
	defer c.close()
	if cfg.Mode == ModeScale {
		return runScale(ctx, c, &cfg, emit)
	}
	if cfg.Mode == ModeHandoff {
		return runHandoff(ctx, c, &cfg, emit)
	}
	// The node prefers the servers as given, like an agent's -servers.
	nodeServers := slices.Clone(cfg.Addresses)
	for _, s := range c.servers {
		if !slices.Contains(nodeServers, s) {
			nodeServers = append(nodeServers, s)
		}
	}
	node, err := startNode(ctx, cfg.Prefix+"-node", nodeServers, &cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Progress, "simulated node %s registered (servers %v)\n", node.id, c.servers)
	r := &runner{cfg: &cfg, c: c, node: node}
	defer func() {
		// Clean up after an interrupt too: the servers are still there. The
		// drain has its own deadline and every call the client's timeout.
		// The node stays up meanwhile: the releases need its detaches.
		if ferr := r.finish(context.WithoutCancel(ctx)); ferr != nil {
			err = errors.Join(err, ferr)
		}
		node.close()
	}()
	switch cfg.Mode {
	case ModeClaim:
		return r.claimRuns(ctx, emit)
	case ModeContended:
		return r.contendedRuns(ctx, emit)
	default:
		return r.releaseRuns(ctx, emit)
	}
}

// runner holds what the runs of one invocation share.
type runner struct {
	cfg  *Config
	c    *cluster
	node *simNode
	// vols is every volume created, for the cleanup.
	vols []string
}

// finish waits for every release to be freed, then deregisters the
// volumes and the node. Leftovers are reported, never forced: a claim
// still releasing needs the node to answer its detach.
func (r *runner) finish(ctx context.Context) error {
	if len(r.vols) == 0 || r.cfg.KeepState {
		return nil
	}
	wait := r.cfg.DrainTimeout
	if wait <= 0 {
		wait = defaultDrainTimeout
	}
	if _, pending, err := r.c.drain(ctx, r.cfg.Prefix, wait); err != nil || pending > 0 {
		if err == nil {
			err = fmt.Errorf("%d volumes still releasing after %s", pending, wait)
		}
		return fmt.Errorf("cleanup skipped: %w", err)
	}
	return r.c.cleanup(ctx, r.vols, r.node)
}

// forEachRun calls fn for every callers value × target, targets inner so
// that runs to be compared (leader and follower at the same load) follow
// each other.
func (r *runner) forEachRun(ctx context.Context, emit func(*Result),
	fn func(ctx context.Context, res *Result) error) error {
	for _, callers := range r.cfg.Callers {
		for _, target := range r.cfg.Targets {
			addr, leader, err := r.c.resolve(ctx, target)
			if err != nil {
				return err
			}
			res := &Result{
				Mode: r.cfg.Mode, Target: target, Address: addr, Leader: leader, Security: r.c.security,
				Callers: callers, Volumes: r.cfg.Volumes, Errors: map[string]int64{},
			}
			if r.cfg.Mode == ModeRelease {
				fmt.Fprintf(r.cfg.Progress, "run: release, target %s (%s), %d allocs claimed by %d callers\n",
					target, addr, r.cfg.Volumes, callers)
			} else {
				fmt.Fprintf(r.cfg.Progress, "run: %s, target %s (%s), %d callers, %s + %s warmup\n",
					r.cfg.Mode, target, addr, callers, r.cfg.Duration, r.cfg.Warmup)
			}
			stopWatch := r.c.watchLeader(ctx, leader, &res.LeaderChanged)
			err = fn(ctx, res)
			stopWatch()
			if err != nil {
				return err
			}
			if len(res.Errors) == 0 {
				res.Errors = nil
			}
			emit(res)
		}
	}
	return nil
}

// drainAfter waits (up to cfg.DrainTimeout, not at all when it is 0) for
// the servers to free every claim released so far, and records how long
// that took or how many volumes were still releasing when it gave up.
func (r *runner) drainAfter(ctx context.Context, res *Result) (bool, error) {
	if r.cfg.DrainTimeout <= 0 {
		return false, nil
	}
	fmt.Fprintf(r.cfg.Progress, "  waiting for the servers to free the released claims\n")
	d, pending, err := r.c.drain(ctx, r.cfg.Prefix, r.cfg.DrainTimeout)
	if err != nil {
		return false, err
	}
	res.DrainSeconds = d.Seconds()
	res.Backlog = pending
	res.Drained = pending == 0
	return res.Drained, nil
}

// fill sets the throughput and latency fields from merged recorders over
// a measured window of secs seconds.
func (res *Result) fill(m merged, secs float64) {
	res.Seconds = secs
	res.Claims, res.Releases = int64(len(m.claims)), int64(len(m.releases))
	res.Ops = res.Claims + res.Releases
	all := append(append([]time.Duration(nil), m.claims...), m.releases...)
	res.Latency = summarize(all)
	cl := summarize(m.claims)
	res.ClaimLatency = &cl
	if len(m.releases) > 0 {
		rl := summarize(m.releases)
		res.ReleaseLatency = &rl
	}
	if secs > 0 {
		res.OpsPerSec = float64(res.Ops) / secs
		res.ClaimsPerSec = float64(res.Claims) / secs
	}
	for k, v := range m.errs {
		res.Errors[k] += v
	}
}

// refused reports whether a claim call was definitely not applied: the
// servers answered with a refusal. Any other failure (timeout, lost
// connection) may have been applied, and the caller releases to be sure.
func refused(err error) bool {
	for _, e := range []error{structs.ErrMaxClaims, structs.ErrInvalid, structs.ErrNotFound,
		structs.ErrConflict, structs.ErrUnschedulable, structs.ErrPermissionDenied, structs.ErrTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
