package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// benchVolume is a volume of the simulated plugin: single-node-writer, so
// every claim is exclusive and every release must be freed before the
// volume can be claimed again.
func benchVolume(id string) *structs.Volume {
	return &structs.Volume{
		ID: id, Name: id, ExternalID: id, PluginID: PluginID,
		AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
	}
}

// registerVolumes registers volumes in batches of at most maxBatch.
func (c *cluster) registerVolumes(ctx context.Context, ids []string) error {
	for start := 0; start < len(ids); start += maxBatch {
		batch := make([]*structs.Volume, 0, maxBatch)
		for _, id := range ids[start:min(start+maxBatch, len(ids))] {
			batch = append(batch, benchVolume(id))
		}
		if _, err := c.admin.RegisterVolumes(ctx, batch...); err != nil {
			return fmt.Errorf("register volumes: %w", err)
		}
	}
	return nil
}

// placeAllocs places allocs in batches of at most maxBatch.
func (c *cluster) placeAllocs(ctx context.Context, allocs []*structs.Alloc) error {
	for start := 0; start < len(allocs); start += maxBatch {
		if _, err := c.admin.PlaceAllocs(ctx, allocs[start:min(start+maxBatch, len(allocs))]...); err != nil {
			return fmt.Errorf("place allocs: %w", err)
		}
	}
	return nil
}

// placeOn places allocs through cl (a caller's own session) with the
// run's token: a caller's client sends the node's secret, which grants no
// alloc:place, as a node's would not.
func (c *cluster) placeOn(ctx context.Context, cl *api.Client, allocs ...*structs.Alloc) error {
	req := &structs.AllocPlaceRequest{Allocs: allocs}
	req.AuthToken = c.cfg.Token
	return cl.Call(ctx, "Alloc.Place", req, &structs.GenericResponse{})
}

// pairs is n (alloc, volume) pairs on one node: alloc i requests only
// volume i, so every pair can be claimed and released on its own.
type pairs struct {
	node    string
	vols    []string
	allocs  []string
	created bool
}

func newPairs(prefix, node string, n int) *pairs {
	p := &pairs{node: node, vols: make([]string, n), allocs: make([]string, n)}
	for i := range n {
		p.vols[i] = fmt.Sprintf("%s-v%06d", prefix, i)
		p.allocs[i] = fmt.Sprintf("%s-a%06d", prefix, i)
	}
	return p
}

func (c *cluster) createPairs(ctx context.Context, p *pairs) error {
	fmt.Fprintf(c.cfg.Progress, "registering %d volumes and placing %d allocs on node %s (batches of %d)\n",
		len(p.vols), len(p.allocs), p.node, maxBatch)
	t0 := time.Now()
	if err := c.registerVolumes(ctx, p.vols); err != nil {
		return err
	}
	p.created = true
	allocs := make([]*structs.Alloc, len(p.allocs))
	for i := range allocs {
		allocs[i] = &structs.Alloc{ID: p.allocs[i], NodeID: p.node, Volumes: []*structs.AllocVolumeRequest{{VolumeID: p.vols[i]}}}
	}
	if err := c.placeAllocs(ctx, allocs); err != nil {
		return err
	}
	fmt.Fprintf(c.cfg.Progress, "  done in %s\n", time.Since(t0).Round(time.Millisecond))
	return nil
}

func (p *pairs) claim(i int) *structs.VolumeClaimRequest {
	return &structs.VolumeClaimRequest{
		VolumeID: p.vols[i], AllocID: p.allocs[i], NodeID: p.node, Mode: structs.ClaimModeWrite,
	}
}

// drain waits up to wait until no volume whose ID starts with prefix has a
// pending volume-claim-gc eval, that is until every claim released so far
// has been freed. It returns how long it waited and how many volumes were
// still releasing when it gave up (0: all freed).
func (c *cluster) drain(ctx context.Context, prefix string, wait time.Duration) (time.Duration, int, error) {
	t0 := time.Now()
	deadline := t0.Add(wait)
	var index uint64
	for {
		evals, meta, err := c.admin.Evals(ctx, structs.EvalStatusPending, "",
			structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: 2 * time.Second})
		if err != nil {
			return time.Since(t0), 0, fmt.Errorf("list pending evals: %w", err)
		}
		pending := 0
		for _, e := range evals {
			if strings.HasPrefix(e.VolumeID, prefix) {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			return time.Since(t0), pending, nil
		}
		index = meta.Index
		// The list changes with every release step: a pause between
		// queries bounds what a long list costs the servers.
		pause := 50 * time.Millisecond
		if pending > 100 {
			pause = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return time.Since(t0), pending, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// cleanup deregisters the volumes (in batches), then stops the node's
// heartbeat and deregisters the node; the node's allocs become lost, which
// releases nothing since none holds a claim. The heartbeat stops first: a
// heartbeat sent after the node is gone would be refused (its secret no
// longer names a node) and counted as a denial by the servers.
func (c *cluster) cleanup(ctx context.Context, vols []string, node *simNode) error {
	fmt.Fprintf(c.cfg.Progress, "cleaning up: deregistering %d volumes and node %s\n", len(vols), node.id)
	for start := 0; start < len(vols); start += maxBatch {
		if _, err := c.admin.DeregisterVolumes(ctx, false, vols[start:min(start+maxBatch, len(vols))]...); err != nil {
			return fmt.Errorf("deregister volumes: %w", err)
		}
	}
	node.stop()
	if err := c.admin.Call(ctx, "Node.Deregister", &structs.NodeDeregisterRequest{NodeIDs: []string{node.id}}, &structs.GenericResponse{}); err != nil {
		return err
	}
	// Its allocations are lost now and hold no claim: remove them, and
	// only them (the prefix), so that a benchmark leaves nothing behind.
	out, err := c.admin.GarbageCollect(ctx, c.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("remove the benchmark's allocations: %w", err)
	}
	fmt.Fprintf(c.cfg.Progress, "cleaning up: removed %d allocations\n", out.AllocsRemoved)
	return nil
}
