package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/claimd/claimd/internal/fencecmd"
	"github.com/claimd/claimd/structs"
)

// stopRetry is how soon a stop that failed (the fence command or the
// unmount) is tried again, both of them: a writer that survived, or was
// started again, is stopped by the command, not by a retried unmount.
const stopRetry = 2 * time.Second

// maxFenceErr keeps a fenced volume's error within what the servers take
// (structs.FenceReport.Validate).
const maxFenceErr = 900

// run is the fence loop: sleep until the fence budget before the lease
// runs out, re-armed by every renewal; fence if no renewal came. It is
// the one place that runs the fence command: claims to stop are queued
// (pending) by the fence and by the check with the servers, and tried
// until stopped.
//
// It begins with the start-up fence: an agent that could not show its
// predecessor's lease live starts with the lease run out, so the first
// round fences every fence-policy claim held here; startupDone closes
// after that round, and only then does the node register.
func (f *fencer) run() {
	budget := f.lease.fenceBudget()
	if f.lease.enabled() && f.lease.remaining()-budget <= 0 {
		if claims := f.held.fenceable(); len(claims) > 0 {
			f.a.logger.Error("agent started without a node lease shown live: fencing the fence-policy volumes held here before the node registers",
				"volumes", len(claims), "why", f.startup.why)
			f.mu.Lock()
			f.fenceSince = time.Now() // said above: not "lease running out" too
			f.mu.Unlock()
			f.fence(0, "agent restarted without a lease shown live: "+f.startup.why)
			f.stopDue()
		}
	} else if f.startup.live && len(f.held.fenceable()) > 0 {
		f.a.logger.Info("the node lease the previous run of this agent published is live: keeping its fence-policy volumes until it runs out or is renewed",
			"remaining", f.startup.remaining.Round(time.Millisecond))
	}
	// Then every claim still held, of any policy, is checked with the
	// servers before the node registers: one they released while this
	// agent was away (an operator's force detach, a fence release) has
	// its writer stopped before the node is ready again. Servers out of
	// reach: the check runs again once the node is connected.
	if len(f.held.list()) > 0 {
		if !f.checkHeld(true) {
			f.a.logger.Warn("could not check the held claims with the servers before registering; checking again once connected")
		}
		f.stopDue()
	}
	close(f.startupDone)
	for {
		var fenceAt <-chan time.Time
		var timer *time.Timer
		if f.lease.enabled() {
			left := f.lease.remaining() - budget
			if left <= 0 {
				if len(f.held.fenceable()) > 0 {
					f.fence(left+budget, "node lease running out")
				}
			} else {
				timer = time.NewTimer(f.lease.clock.realDuration(left))
				fenceAt = timer.C
			}
		}
		f.stopDue()
		var retry <-chan time.Time
		if next, ok := f.nextRetry(); ok {
			retry = time.After(max(time.Until(next), 0))
		}
		select {
		case <-fenceAt:
		case <-f.lease.renewed:
			f.afterRenewal()
		case <-f.wake:
		case <-retry:
		case <-f.a.ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// fence queues every held fence-policy claim to be stopped, the record
// written first.
func (f *fencer) fence(remaining time.Duration, reason string) {
	claims := f.held.fenceable()
	f.mu.Lock()
	f.generation++
	f.checkAfterRenewal = true
	first := f.fenceSince.IsZero()
	if first {
		f.fenceSince = time.Now()
	}
	rec := f.recordLocked(remaining)
	for _, c := range claims {
		if !containsString(rec.Allocs, c.AllocID) {
			rec.Allocs = append(rec.Allocs, c.AllocID)
		}
		f.addPendingLocked(c, reason)
	}
	f.saveLocked()
	f.mu.Unlock()
	if first {
		f.a.logger.Error("node lease running out: fencing", "volumes", len(claims), "lease_remaining", remaining)
	}
}

// stopClaim queues a claim the servers no longer hold for this node.
func (f *fencer) stopClaim(c *heldClaim, reason string) {
	f.mu.Lock()
	rec := f.recordLocked(0)
	if !containsString(rec.Allocs, c.AllocID) {
		rec.Allocs = append(rec.Allocs, c.AllocID)
	}
	f.generation++ // a mount of it under way is undone
	f.addPendingLocked(c, reason)
	f.saveLocked()
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// recordLocked is the record the current stops go into: a new one once
// the last was reported and nothing of it is left to stop.
func (f *fencer) recordLocked(remaining time.Duration) *fenceRecord {
	if f.record == nil || f.record.Report == nil || f.record.Reported && len(f.pending) == 0 {
		f.record = &fenceRecord{Report: &structs.FenceReport{At: time.Now().UTC(), LeaseRemaining: max(remaining, 0)}}
		f.seq++
	}
	return f.record
}

func (f *fencer) addPendingLocked(c *heldClaim, reason string) {
	if _, ok := f.pending[c.key()]; ok {
		return
	}
	cc := *c
	f.pending[c.key()] = &pendingStop{claim: &cc, reason: reason}
}

func (f *fencer) isPending(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.pending[key]
	return ok
}

// nextRetry is when the earliest failed stop is due again.
func (f *fencer) nextRetry() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next time.Time
	first := true
	for _, p := range f.pending {
		if first || p.next.Before(next) {
			next, first = p.next, false
		}
	}
	return next, !first
}

// stopDue stops every pending claim that is due, recording each outcome,
// and has the next registration carry the report.
func (f *fencer) stopDue() {
	now := time.Now()
	f.mu.Lock()
	var due []*pendingStop
	for _, p := range f.pending {
		if !p.next.After(now) {
			due = append(due, p)
		}
	}
	f.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].claim.key() < due[j].claim.key() })
	for _, p := range due {
		if f.a.ctx.Err() != nil {
			return
		}
		fv := f.stopOne(p)
		f.mu.Lock()
		p.attempts++
		if fv.HookOK && fv.Unmounted {
			delete(f.pending, p.claim.key())
		} else {
			p.next = time.Now().Add(stopRetry)
		}
		f.noteLocked(fv)
		f.mu.Unlock()
	}
	if len(due) > 0 {
		// The report goes with the next registration, now if the servers
		// are in reach.
		f.a.wakeHeartbeat()
	}
}

// noteLocked puts one outcome in the current report.
func (f *fencer) noteLocked(fv *structs.FencedVolume) {
	rec := f.recordLocked(0)
	replaced := false
	for i, v := range rec.Report.Volumes {
		if v.AllocID == fv.AllocID && v.VolumeID == fv.VolumeID {
			rec.Report.Volumes[i], replaced = fv, true
		}
	}
	if !replaced {
		if len(rec.Report.Volumes) >= maxFencedVolumes {
			rec.Report.Volumes = rec.Report.Volumes[1:]
		}
		rec.Report.Volumes = append(rec.Report.Volumes, fv)
	}
	rec.Reported = false
	f.seq++
	f.saveLocked()
}

// maxFencedVolumes is what one report may carry (the servers' bound).
const maxFencedVolumes = 256

// stopOne runs the fence command and the unmount for one claim. The
// claim is forgotten only when both succeeded.
func (f *fencer) stopOne(p *pendingStop) *structs.FencedVolume {
	c := p.claim
	node := f.a.ident.ID
	log := f.a.logger.With("alloc", c.AllocID, "volume", c.VolumeID)
	fv := &structs.FencedVolume{AllocID: c.AllocID, VolumeID: c.VolumeID, HookOK: true}
	// The workload's own wrapper (claimd exec) stops at once.
	f.a.leaseFile.markStopping(c.AllocID, c.VolumeID)
	var errs []error
	if f.command != "" {
		if err := f.runHook(c); err != nil {
			fv.HookOK = false
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(f.a.ctx, f.lease.fenceBudget())
	err := f.unmount(ctx, c)
	cancel()
	if err == nil {
		fv.Unmounted = true
	} else {
		errs = append(errs, fmt.Errorf("unmount: %w", err))
	}
	fv.Done = time.Now().UTC()
	if fv.HookOK && fv.Unmounted {
		if err := f.held.remove(c.AllocID, c.VolumeID); err != nil {
			log.Warn("could not update the held-claims record", "error", err)
		}
		log.Warn("fenced: writer stopped and volume unmounted on this node", "path", c.MountPath, "reason", p.reason, "attempt", p.attempts+1)
		return fv
	}
	fv.Error = errors.Join(errs...).Error()
	if len(fv.Error) > maxFenceErr {
		fv.Error = fv.Error[:maxFenceErr]
	}
	log.Error(fmt.Sprintf("fence failed: volume %s may still be written on node %s; the fence command and the unmount are retried until they succeed", c.VolumeID, node),
		"hook_ok", fv.HookOK, "unmounted", fv.Unmounted, "reason", p.reason, "attempt", p.attempts+1, "retry_in", stopRetry, "error", fv.Error)
	return fv
}

// unmount undoes the claim's mount here (nothing mounted counts as done).
func (f *fencer) unmount(ctx context.Context, c *heldClaim) error {
	mm, err := f.a.mountManager(c.PluginID)
	if err != nil {
		return err
	}
	return mm.UnmountVolume(ctx, c.VolumeID, c.ExternalID, c.AllocID, c.usage())
}

// runHook runs the operator's fence command for one claim, bounded by
// -fence-timeout in a process group of its own (internal/fencecmd). It is
// given IDs and the mount path only, never a secret.
func (f *fencer) runHook(c *heldClaim) error {
	return fencecmd.Run(f.a.ctx, f.command, []string{
		"CLAIMD_ALLOC_ID=" + c.AllocID, "CLAIMD_VOLUME_ID=" + c.VolumeID,
		"CLAIMD_MOUNT_PATH=" + c.MountPath, "CLAIMD_NODE_ID=" + f.a.ident.ID}, f.timeout)
}

// afterRenewal: the lease is live again. After a fence, what is held here
// is checked with the servers (fence_check.go).
func (f *fencer) afterRenewal() {
	f.mu.Lock()
	f.fenceSince = time.Time{}
	check := f.checkAfterRenewal
	f.checkAfterRenewal = false
	f.mu.Unlock()
	if check {
		f.requestCheck()
	}
}
