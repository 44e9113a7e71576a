package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimd/claimd/structs"
)

// Once the node reaches the servers (at start, after it was cut off,
// after a fence), every claim held here is checked against what the
// servers hold for this node. A claim they no longer hold (its allocation
// unknown, on another node, or ended with the claim released; the
// volume's claims no longer listing this allocation on this node; the
// claim released without this node's unmount: a fence release, an
// operator's `volume detach -force`) has its writer stopped like a fence:
// the fence command, then the unmount, retried until both succeed. The
// servers may have given the volume to another node already; this node
// must not keep writing to it, whatever the claim's policy.

// requestCheck asks the check loop to run (coalesced).
func (f *fencer) requestCheck() {
	select {
	case f.check <- struct{}{}:
	default:
	}
}

// checkLoop runs the checks the heartbeat loop and the fence loop ask for,
// again every stopRetry until one went through whole.
func (f *fencer) checkLoop() {
	var retry <-chan time.Time
	for {
		select {
		case <-f.check:
		case <-retry:
		case <-f.a.ctx.Done():
			return
		}
		// Held claims first: one the servers released joins the
		// fenced allocations reported failed just after.
		ok := f.checkHeld(false)
		if !f.reportFencedAllocs() {
			ok = false
		}
		retry = nil
		if !ok {
			retry = time.After(stopRetry)
		}
	}
}

// checkHeld compares every held claim that is not being stopped already
// with the servers; it reports whether every comparison went through.
// Before the node registers (beforeRegister) it gives up at the first
// claim the servers could not answer for (out of reach: every other
// question would wait as long), leaving the rest to the check once
// connected.
func (f *fencer) checkHeld(beforeRegister bool) bool {
	when := ""
	if beforeRegister {
		when = " before the node registers"
	}
	complete := true
	for _, c := range f.held.list() {
		if f.a.ctx.Err() != nil {
			return false
		}
		if f.isPending(c.key()) {
			continue
		}
		held, why, err := f.serversHold(c)
		if err != nil {
			if beforeRegister {
				return false
			}
			complete = false
			logRetry(f.a.logger, err, "could not check a held claim with the servers; retrying", "alloc", c.AllocID, "volume", c.VolumeID, "error", err)
			continue
		}
		// A node detach from the servers may have unmounted it while we
		// asked: then it is done, nothing to stop.
		if held || !f.held.has(c.AllocID, c.VolumeID) {
			continue
		}
		f.a.logger.Error(fmt.Sprintf("the servers no longer hold volume %s for this node: stopping its writer (fence command, then unmount)%s", c.VolumeID, when),
			"alloc", c.AllocID, "volume", c.VolumeID, "node_lost", c.NodeLost, "why", why)
		f.stopClaim(c, "released by the servers: "+why)
	}
	return complete
}

// serversHold reports whether the servers still hold the claim for this
// node, and if not why. An error means they could not tell now.
func (f *fencer) serversHold(c *heldClaim) (bool, string, error) {
	me := f.a.ident.ID
	ctx, cancel := context.WithTimeout(f.a.ctx, 10*time.Second)
	defer cancel()
	var ar structs.AllocResponse
	err := f.a.conn.call(ctx, "Alloc.Get", &structs.AllocSpecificRequest{ID: c.AllocID}, &ar)
	switch {
	case errors.Is(err, structs.ErrNotFound) || err == nil && ar.Alloc == nil:
		return false, "the servers do not know its allocation", nil
	case errors.Is(err, structs.ErrPermissionDenied) && !structs.IsNodeNotYetKnown(err):
		// A node may always read its own allocations.
		return false, "the servers do not show this node its allocation", nil
	case err != nil:
		return false, "", err
	case ar.Alloc.NodeID != me:
		return false, fmt.Sprintf("its allocation is on node %s", ar.Alloc.NodeID), nil
	case ar.Alloc.DesiredStatus == structs.AllocDesiredRun && ar.Alloc.ClientStatus == structs.AllocClientPending:
		// The servers want it to run and show it not started: a record
		// older than this node (a snapshot restore) lost its claim, not
		// released it. The alloc runner claims it again, and stops the
		// writer if the claim is refused (restore.go).
		return true, "", nil
	}
	var vr structs.VolumeResponse
	if f.noVolumeRead.Load() {
		// Refused once already: asking again would only fill the
		// servers' denied-call log and metric.
		err = structs.NewError(structs.CodePermissionDenied, "Volume.Get: refused to this node earlier")
	} else {
		err = f.a.conn.call(ctx, "Volume.Get", &structs.VolumeSpecificRequest{ID: c.VolumeID, NodeID: me}, &vr)
	}
	switch {
	case errors.Is(err, structs.ErrNotFound) || err == nil && vr.Volume == nil:
		return false, "the volume is not registered any more", nil
	case errors.Is(err, structs.ErrPermissionDenied) && !structs.IsNodeNotYetKnown(err):
		// This node's secret may not read volumes (ACLs): the allocation
		// alone decides. An ended allocation's claim under wait or
		// manual is still to be unmounted by the servers' node detach
		// (they wait for this node), so only a fence-policy one, whose
		// release may have skipped it, is stopped here; a claim released
		// by a force detach is not seen (see the notes of issue 39).
		f.noVolumeRead.Store(true)
		f.warnNoVolumeRead.Do(func() {
			f.a.logger.Warn("the servers do not let this node read its volumes' claims: only fence-policy claims of ended allocations are checked; a claim an operator force-detached is not noticed", "error", err)
		})
		if ar.Alloc.Terminal() && c.NodeLost == structs.NodeLostFence {
			return false, fmt.Sprintf("its allocation ended (%s) and a fence-policy release may have skipped this node's unmount", ar.Alloc.ClientStatus), nil
		}
		return true, "", nil
	case err != nil:
		return false, "", err
	}
	return claimHeldFor(vr.Volume, c.AllocID, me)
}

// claimHeldFor decides from the volume as the servers have it: the claim
// is held while it lists this allocation on this node, live or on its way
// out but before the node detach (the servers will ask this node to
// unmount it then).
func claimHeldFor(v *structs.Volume, allocID, nodeID string) (bool, string, error) {
	cl := v.Claim(allocID)
	if cl == nil {
		// Freed already: the last freed claims say how, if it is there.
		for _, r := range v.Released {
			if r != nil && r.AllocID == allocID && r.NodeID == nodeID {
				cl = r
			}
		}
		if cl == nil {
			return false, "the volume's claims no longer list this allocation", nil
		}
	}
	switch {
	case cl.NodeID != nodeID:
		return false, fmt.Sprintf("the volume's claim of this allocation is on node %s", cl.NodeID), nil
	case cl.State.Rank() >= structs.ClaimStateNodeDetached.Rank():
		how := "without this node's unmount"
		switch {
		case cl.Fenced:
			how = "as fenced (the node lease ran out)"
		case cl.ForcedSkip || cl.NodeDetachSkipped:
			how = "by an operator's force detach"
		}
		return false, fmt.Sprintf("the claim was released %s (state %s)", how, cl.State), nil
	}
	return true, "", nil
}

// reportFencedAllocs reports, once the servers answer again, the fenced
// allocations that they still consider running: the node will not run
// them again, and failing them lets the servers release their claims
// through the ordinary path (the node detach finds nothing mounted). It
// reports whether every one went through.
func (f *fencer) reportFencedAllocs() bool {
	f.mu.Lock()
	var allocs []string
	if f.record != nil {
		for _, id := range f.record.Allocs {
			if !f.failedReported[id] {
				allocs = append(allocs, id)
			}
		}
	}
	f.mu.Unlock()
	complete := true
	for _, id := range allocs {
		ctx, cancel := context.WithTimeout(f.a.ctx, 10*time.Second)
		var resp structs.AllocResponse
		err := f.a.conn.call(ctx, "Alloc.Get", &structs.AllocSpecificRequest{ID: id}, &resp)
		cancel()
		if err != nil && !errors.Is(err, structs.ErrNotFound) {
			complete = false
			continue
		}
		if resp.Alloc != nil && !resp.Alloc.Terminal() {
			ctx, cancel := context.WithTimeout(f.a.ctx, 10*time.Second)
			err = f.a.statuses.send(ctx, &structs.AllocClientUpdate{ID: id, ClientStatus: structs.AllocClientFailed,
				ClientDescription: "fenced: the node could not show its lease live, or the servers released its claim"})
			cancel()
			if err != nil {
				complete = false
				continue
			}
			f.a.logger.Warn("fenced allocation reported failed", "alloc", id)
		}
		f.mu.Lock()
		f.failedReported[id] = true
		f.mu.Unlock()
	}
	return complete
}
