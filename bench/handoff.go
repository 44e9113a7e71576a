package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/claimd/claimd/structs"
)

// The handoff mode measures what a volume's users wait for (issue 41):
// the time from "the old holder is done" (its allocation stopped) to "the
// new holder writes" (the waiting allocation running, its volume mounted
// by the node's agent through the real plugin). Each round places a
// holder on each of -volumes single-node-writer volumes, waits until they
// run, places a waiter on each (pending: the volume is held), stops every
// holder with one call and follows the waiters by blocking query, noting
// when each runs. The measurement includes the whole release (node
// detach, controller detach), the waiter's claim and the mount.

func runHandoff(ctx context.Context, c *cluster, cfg *Config, emit func(*Result)) (err error) {
	if cfg.HandoffPlugin == "" {
		cfg.HandoffPlugin = "hostdir"
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 5
	}
	node, err := handoffNode(ctx, c, cfg)
	if err != nil {
		return err
	}
	vols := make([]string, cfg.Volumes)
	for i := range vols {
		vols[i] = fmt.Sprintf("%s-hv%04d", cfg.Prefix, i)
	}
	for start := 0; start < len(vols); start += maxBatch {
		var batch []*structs.Volume
		for _, id := range vols[start:min(start+maxBatch, len(vols))] {
			batch = append(batch, &structs.Volume{ID: id, Name: id, ExternalID: id, PluginID: cfg.HandoffPlugin,
				AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem})
		}
		if _, err := c.admin.RegisterVolumes(ctx, batch...); err != nil {
			return fmt.Errorf("register volumes: %w", err)
		}
	}
	fmt.Fprintf(cfg.Progress, "handoff: %d volumes of plugin %s on node %s, %d rounds\n", len(vols), cfg.HandoffPlugin, node, cfg.Rounds)
	var last []string // the allocations still running at the end
	defer func() {
		if cfg.KeepState {
			return
		}
		cctx := context.WithoutCancel(ctx)
		if cerr := handoffCleanup(cctx, c, cfg, vols, last); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	holders := handoffAllocs(cfg.Prefix+"-r0h", node, vols)
	if err := c.placeAllocs(ctx, holders); err != nil {
		return err
	}
	last = allocIDs(holders)
	if _, err := waitRunning(ctx, c, node, last, time.Time{}, 5*time.Minute); err != nil {
		return fmt.Errorf("holders: %w", err)
	}
	for round := 1; round <= cfg.Rounds; round++ {
		waiters := handoffAllocs(fmt.Sprintf("%s-r%dw", cfg.Prefix, round), node, vols)
		if err := c.placeAllocs(ctx, waiters); err != nil {
			return err
		}
		// Let every waiter try its claim and be refused first (the volume
		// is held), as a workload waiting for a volume would be.
		if err := waitTried(ctx, c, node, allocIDs(waiters), time.Minute); err != nil {
			return err
		}
		res := &Result{Mode: ModeHandoff, Target: node, Volumes: len(vols), Callers: 1, Started: time.Now(), Errors: map[string]int64{}}
		t0 := time.Now()
		// The stop's time on this machine's clock, for lining the round up
		// with an agent's log (where the handoff's time goes).
		fmt.Fprintf(cfg.Progress, "handoff round %d: holders stopped at %s\n", round, t0.UTC().Format(time.RFC3339Nano))
		if _, err := c.admin.StopAllocs(ctx, last...); err != nil {
			return fmt.Errorf("stop holders: %w", err)
		}
		ds, err := waitRunning(ctx, c, node, allocIDs(waiters), t0, 5*time.Minute)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		res.Seconds = time.Since(t0).Seconds()
		res.Latency = summarize(ds)
		res.Ops = int64(len(ds))
		res.Errors = nil
		emit(res)
		last = allocIDs(waiters)
	}
	return nil
}

// handoffNode finds the node to run on: cfg.HandoffNode (ID, prefix or
// name), or the first ready node whose cfg.HandoffPlugin is healthy.
func handoffNode(ctx context.Context, c *cluster, cfg *Config) (string, error) {
	nodes, _, err := c.admin.Nodes(ctx, structs.QueryOptions{})
	if err != nil {
		return "", fmt.Errorf("list nodes: %w", err)
	}
	var found []string
	for _, n := range nodes {
		info := n.CSINodePlugins[cfg.HandoffPlugin]
		if n.Status != structs.NodeStatusReady || info == nil || !info.Healthy {
			continue
		}
		if cfg.HandoffNode == "" || n.ID == cfg.HandoffNode || n.Name == cfg.HandoffNode || strings.HasPrefix(n.ID, cfg.HandoffNode) {
			found = append(found, n.ID)
		}
	}
	switch {
	case len(found) == 0:
		return "", fmt.Errorf("no ready node with a healthy node plugin %q matches -node %q", cfg.HandoffPlugin, cfg.HandoffNode)
	case len(found) > 1 && cfg.HandoffNode != "":
		return "", fmt.Errorf("-node %q names %d nodes: %s", cfg.HandoffNode, len(found), strings.Join(found, ", "))
	}
	return found[0], nil
}

func handoffAllocs(prefix, node string, vols []string) []*structs.Alloc {
	out := make([]*structs.Alloc, len(vols))
	for i, v := range vols {
		out[i] = &structs.Alloc{ID: fmt.Sprintf("%s%04d", prefix, i), NodeID: node,
			Volumes: []*structs.AllocVolumeRequest{{VolumeID: v}}}
	}
	return out
}

func allocIDs(allocs []*structs.Alloc) []string {
	ids := make([]string, len(allocs))
	for i, a := range allocs {
		ids[i] = a.ID
	}
	return ids
}

// waitRunning follows the node's allocations by blocking query until every
// one of ids runs, and returns for each the time from t0 to when it was
// first seen running. A waiter that fails ends the wait with its error.
func waitRunning(ctx context.Context, c *cluster, node string, ids []string, t0 time.Time, limit time.Duration) ([]time.Duration, error) {
	var ds []time.Duration
	err := watchAllocs(ctx, c, node, ids, limit, "running", func(a *structs.Alloc, seen time.Time) (bool, error) {
		switch a.ClientStatus {
		case structs.AllocClientRunning:
			ds = append(ds, seen.Sub(t0))
			return true, nil
		case structs.AllocClientFailed, structs.AllocClientLost, structs.AllocClientComplete:
			return false, fmt.Errorf("allocation %s is %s: %s", a.ID, a.ClientStatus, a.ClientDescription)
		}
		return false, nil
	})
	return ds, err
}

// waitTried waits until every waiter's description says it waits for its
// volume (its claim was refused once).
func waitTried(ctx context.Context, c *cluster, node string, ids []string, limit time.Duration) error {
	return watchAllocs(ctx, c, node, ids, limit, "waiting for their volume", func(a *structs.Alloc, _ time.Time) (bool, error) {
		return strings.Contains(a.ClientDescription, "waiting for volume"), nil
	})
}

// watchAllocs follows the node's allocations by blocking query until done
// says so of every one of ids (seen: when the answer came), done fails, or
// limit passes (what names the state waited for, for the error).
func watchAllocs(ctx context.Context, c *cluster, node string, ids []string, limit time.Duration, what string,
	done func(a *structs.Alloc, seen time.Time) (bool, error)) error {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(limit)
	var index uint64
	for len(want) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d allocations not %s after %s", len(want), what, limit)
		}
		allocs, meta, err := c.admin.Allocs(ctx, node, structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: 10 * time.Second})
		if err != nil {
			return err
		}
		seen := time.Now()
		index = meta.Index
		for _, a := range allocs {
			if !want[a.ID] {
				continue
			}
			ok, err := done(a, seen)
			if err != nil {
				return err
			}
			if ok {
				delete(want, a.ID)
			}
		}
	}
	return nil
}

// handoffCleanup stops what still runs, waits for its claims to be freed,
// deregisters the volumes and removes the run's allocations.
func handoffCleanup(ctx context.Context, c *cluster, cfg *Config, vols, running []string) error {
	if len(running) > 0 {
		if _, err := c.admin.StopAllocs(ctx, running...); err != nil {
			return fmt.Errorf("cleanup: stop: %w", err)
		}
	}
	wait := cfg.DrainTimeout
	if wait <= 0 {
		wait = defaultDrainTimeout
	}
	if err := waitNoClaims(ctx, c, cfg, wait); err != nil {
		return fmt.Errorf("cleanup skipped: %w", err)
	}
	for start := 0; start < len(vols); start += maxBatch {
		if _, err := c.admin.DeregisterVolumes(ctx, false, vols[start:min(start+maxBatch, len(vols))]...); err != nil {
			return fmt.Errorf("cleanup: deregister volumes: %w", err)
		}
	}
	out, err := c.admin.GarbageCollect(ctx, cfg.Prefix)
	if err != nil {
		return fmt.Errorf("cleanup: remove allocations: %w", err)
	}
	fmt.Fprintf(cfg.Progress, "cleaning up: %d volumes deregistered, %d allocations removed\n", len(vols), out.AllocsRemoved)
	return nil
}

// waitNoClaims follows the run's volumes by blocking query until none has
// a claim, live or being released (the last waiters' stop goes through
// their node's report first, so there may be no eval to wait on yet).
func waitNoClaims(ctx context.Context, c *cluster, cfg *Config, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var index uint64
	for {
		vols, meta, err := c.admin.Volumes(ctx, cfg.HandoffPlugin, structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: 5 * time.Second})
		if err != nil {
			return err
		}
		held := 0
		for _, v := range vols {
			if strings.HasPrefix(v.ID, cfg.Prefix) && v.HasClaims() {
				held++
			}
		}
		if held == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d volumes still claimed after %s", held, limit)
		}
		index = meta.Index
	}
}
