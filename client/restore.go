package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/backoff"
	"github.com/claimd/claimd/structs"
)

// After a snapshot restore the servers' record is older than this node:
// an allocation this node runs, its volumes mounted, can show as pending
// with no claim, and one placed after the backup is not in the record at
// all. The agent re-reports what it holds rather than leaving the record
// wrong (another node could be given the volume) or waiting for an
// operator:
//
//   - an allocation the servers show pending while it runs here has its
//     claims taken again (the same claims: a claim is idempotent) and is
//     reported running; a claim the servers refuse now (the restored
//     record gives the volume to another allocation) has its writer
//     stopped here like a fence: the servers decided;
//   - a held claim whose allocation the servers' list for this node does
//     not have any more has the held claims checked with the servers
//     (fence_check.go), which stops the writers of the ones they do not
//     know.

// rereport tells the servers again how an allocation ended here, when a
// restored record shows it live. Called with r.mu held.
func (r *allocRunner) rereport(allocID string, st structs.AllocClientStatus) {
	if r.rereporting[allocID] {
		return
	}
	r.rereporting[allocID] = true
	r.a.logger.Warn("the servers show an allocation that ended here as live (a restored record?): reporting its end again", "alloc", allocID, "status", st)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.report(r.a.ctx, allocID, st, "ended on this node (reported again after the servers' record lost it)")
		r.mu.Lock()
		delete(r.rereporting, allocID)
		r.mu.Unlock()
	}()
}

// olderRecord asks for the held claims to be checked when one of them
// belongs to an allocation the servers' list for this node lacks. Called
// with r.mu held.
func (r *allocRunner) olderRecord(allocs []*structs.Alloc) {
	listed := make(map[string]bool, len(allocs))
	for _, a := range allocs {
		listed[a.ID] = true
	}
	for id := range r.finished {
		if !listed[id] {
			delete(r.finished, id) // gone from the servers (a GC): nothing to say
		}
	}
	for _, c := range r.a.held.list() {
		if !listed[c.AllocID] {
			r.a.logger.Warn("the servers no longer list an allocation this node holds a volume for (a restored record?): checking the held claims with them",
				"alloc", c.AllocID, "volume", c.VolumeID)
			r.a.fence.requestCheck()
			return
		}
	}
}

// reassert re-takes the claims of an allocation that runs here and that
// the servers show pending, then reports it running. Called with r.mu
// held: the work runs in its own goroutine.
func (r *allocRunner) reassert(alloc *structs.Alloc, task *allocTask) {
	log := r.a.logger.With("alloc", alloc.ID)
	log.Warn("the servers show an allocation that runs here as pending (a restored record?): claiming its volumes again")
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ok := r.reclaim(alloc)
		r.mu.Lock()
		task.reasserting = false
		r.mu.Unlock()
		if ok {
			log.Info("allocation's claims re-taken after the servers lost them; reported running again")
		}
	}()
}

// reclaim claims each volume of alloc again; it reports whether all were
// granted (and the allocation reported running).
func (r *allocRunner) reclaim(alloc *structs.Alloc) bool {
	ctx := r.a.ctx
	for _, req := range alloc.Volumes {
		mode := structs.ClaimModeWrite
		if req.ReadOnly {
			mode = structs.ClaimModeRead
		}
		claimReq := &structs.VolumeClaimRequest{VolumeID: req.VolumeID, AllocID: alloc.ID, NodeID: r.a.ident.ID, Mode: mode}
		err := r.claimOnce(ctx, claimReq)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		// Refused: the record gives the volume to someone else (or the
		// allocation may not claim it). This node must not keep writing.
		for _, c := range r.a.held.list() {
			if c.AllocID == alloc.ID && c.VolumeID == req.VolumeID {
				r.a.logger.Error(fmt.Sprintf("the servers refuse this node's claim on volume %s again: stopping its writer (fence command, then unmount)", req.VolumeID),
					"alloc", alloc.ID, "error", err)
				r.a.fence.stopClaim(c, "claim refused after the servers lost it: "+err.Error())
			}
		}
		r.report(ctx, alloc.ID, structs.AllocClientFailed, fmt.Sprintf("volume %q: the servers' record lost this claim and refuse it now: %v", req.VolumeID, err))
		return false
	}
	return r.report(ctx, alloc.ID, structs.AllocClientRunning, "")
}

// claimOnce sends a claim, retrying only what says nothing of the claim
// itself (no leader, a timeout, a server going away) for a short while.
func (r *allocRunner) claimOnce(ctx context.Context, req *structs.VolumeClaimRequest) error {
	pace := backoff.WithJitter(250*time.Millisecond, 5*time.Second)
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var resp structs.VolumeClaimResponse
		err := r.a.conn.call(cctx, "Volume.Claim", req, &resp)
		cancel()
		// A refusal that may pass (the volume held by an allocation whose
		// end is being re-reported by its own node, a plugin coming back)
		// is retried too, for the same short while.
		transient := errors.Is(err, structs.ErrNoLeader) || errors.Is(err, structs.ErrTimeout) ||
			errors.Is(err, structs.ErrShutdown) || errors.Is(err, structs.ErrUnavailable) || retryableClaimError(err)
		if err == nil || !transient || time.Now().After(deadline) {
			return err
		}
		if backoff.Sleep(ctx, pace.Next()) != nil {
			return ctx.Err()
		}
	}
}
