package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/claimd/claimd/structs"
)

// Self-fencing (decision 39). When the node lease is about to run out
// without renewal, the agent stops what writes through the volumes whose
// policy is fence (the operator's fence command), unmounts them locally
// (NodeUnpublish, NodeUnstage) and writes down what it did, all before the
// lease runs out. The servers, counting from the last heartbeat they
// received with a margin for clock drift, skip the node detach of those
// claims only after that. A fenced node does not mount again on its own:
// once it reaches the servers it reports the fence, and allocations that
// are still running there are reported failed.

// fenceRecordFile keeps the last fence report in the data dir until the
// servers acknowledged it.
const fenceRecordFile = "fence.json"

// fenceRecord is the durable form of the last fence.
type fenceRecord struct {
	Report *structs.FenceReport `json:"report"`
	// Reported: a registration carrying the report was acknowledged.
	Reported bool `json:"reported"`
	// Allocs are the allocations fenced, reported failed once the servers
	// are back if they still run there.
	Allocs []string `json:"allocs,omitempty"`
}

// fencer runs the fence loop and guards mounts against it.
type fencer struct {
	a       *Agent
	lease   *nodeLease
	held    *heldClaims
	command string
	path    string

	mu sync.Mutex
	// generation counts fences: a mount that began under one generation
	// and finished under another is undone (fenced while it ran).
	generation uint64
	record     *fenceRecord
	// failedReported: fenced allocations already reported failed.
	failedReported map[string]bool
	// sweepHeld: after a start or a fence, held fence-policy claims of
	// allocations the servers ended meanwhile are unmounted at the next
	// renewal (their release may have skipped the node detach).
	sweepHeld bool
}

func newFencer(a *Agent, lease *nodeLease, held *heldClaims, command string) (*fencer, error) {
	f := &fencer{a: a, lease: lease, held: held, command: command,
		path: filepath.Join(a.cfg.DataDir, fenceRecordFile), failedReported: map[string]bool{}, sweepHeld: true}
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		var rec fenceRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("read %s: %w", f.path, err)
		}
		f.record = &rec
	}
	return f, nil
}

// mountAllowed is checked before a volume under the fence policy is
// mounted: only while the lease has more left than the fence needs.
// It returns the fence generation to pass to mountStillValid.
func (f *fencer) mountAllowed(policy structs.NodeLostPolicy) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if policy == structs.NodeLostFence && f.lease.enabled() && f.lease.remaining() <= f.lease.fenceBudget() {
		return 0, structs.NewError(structs.CodeUnavailable, "this node's lease is not renewed: volumes under the fence policy are not mounted until it is")
	}
	return f.generation, nil
}

// mountStillValid reports whether no fence ran since mountAllowed.
func (f *fencer) mountStillValid(gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.generation == gen
}

// pendingReport is the fence report to send with the next registration.
func (f *fencer) pendingReport() *structs.FenceReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record == nil || f.record.Reported {
		return nil
	}
	return f.record.Report.Copy()
}

// reported marks the report sent with an acknowledged registration.
func (f *fencer) reported(r *structs.FenceReport) {
	if r == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record == nil || f.record.Report == nil || !f.record.Report.At.Equal(r.At) {
		return
	}
	f.record.Reported = true
	f.saveLocked()
}

// fencedAlloc reports whether the allocation was fenced by the last fence.
func (f *fencer) fencedAlloc(allocID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record == nil {
		return false
	}
	for _, id := range f.record.Allocs {
		if id == allocID {
			return true
		}
	}
	return false
}

func (f *fencer) saveLocked() {
	b, err := json.Marshal(f.record)
	if err == nil {
		err = writeFileDurable(f.path, b)
	}
	if err != nil {
		f.a.logger.Error("could not record the fence in the data dir", "path", f.path, "error", err)
	}
}

// run is the fence loop: sleep until the fence budget before the lease
// runs out, re-armed by every renewal; fence if no renewal came. After a
// fence, unmounts that failed are retried, and once the lease is renewed
// the fenced allocations that still run are reported failed.
func (f *fencer) run() {
	if !f.lease.enabled() {
		return
	}
	budget := f.lease.fenceBudget()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		left := f.lease.remaining() - budget
		if left <= 0 {
			if len(f.held.fenceable()) > 0 {
				f.fence(left + budget)
				retry.Reset(5 * time.Second)
			}
			// Wait for a renewal (or retry the unmounts that failed).
			select {
			case <-f.lease.renewed:
				f.afterRenewal()
			case <-retry.C:
			case <-f.a.ctx.Done():
				return
			}
			continue
		}
		timer := time.NewTimer(f.lease.clock.realDuration(left))
		select {
		case <-timer.C:
		case <-f.lease.renewed:
			f.afterRenewal()
		case <-f.a.ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// fence undoes every held fence-policy claim: the hook, then the unmount,
// the record written before and after each.
func (f *fencer) fence(remaining time.Duration) {
	claims := f.held.fenceable()
	f.mu.Lock()
	f.generation++
	f.sweepHeld = true
	first := f.record == nil || f.record.Reported || f.record.Report == nil
	if first {
		f.record = &fenceRecord{Report: &structs.FenceReport{At: time.Now().UTC(), LeaseRemaining: max(remaining, 0)}}
	}
	rec := f.record
	for _, c := range claims {
		if !containsString(rec.Allocs, c.AllocID) {
			rec.Allocs = append(rec.Allocs, c.AllocID)
		}
	}
	f.saveLocked()
	f.mu.Unlock()
	if first {
		f.a.logger.Error("node lease running out: fencing", "volumes", len(claims), "lease_remaining", remaining)
	}

	budget := f.lease.fenceBudget()
	for _, c := range claims {
		fv := f.fenceOne(c, budget)
		f.mu.Lock()
		replaced := false
		for i, v := range rec.Report.Volumes {
			if v.AllocID == fv.AllocID && v.VolumeID == fv.VolumeID {
				rec.Report.Volumes[i], replaced = fv, true
			}
		}
		if !replaced {
			rec.Report.Volumes = append(rec.Report.Volumes, fv)
		}
		rec.Reported = false
		f.saveLocked()
		f.mu.Unlock()
	}
}

// fenceOne runs the hook and unmounts one claim.
func (f *fencer) fenceOne(c *heldClaim, budget time.Duration) *structs.FencedVolume {
	log := f.a.logger.With("alloc", c.AllocID, "volume", c.VolumeID)
	fv := &structs.FencedVolume{AllocID: c.AllocID, VolumeID: c.VolumeID, HookOK: true}
	var errs []error
	if f.command != "" {
		if err := f.runHook(c, budget/2); err != nil {
			fv.HookOK = false
			errs = append(errs, err)
			log.Error("fence command failed; unmounting anyway", "error", err)
		}
	}
	ctx, cancel := context.WithTimeout(f.a.ctx, budget)
	defer cancel()
	err := f.unmount(ctx, c)
	if err == nil {
		fv.Unmounted = true
		log.Warn("fenced: volume unmounted on this node", "path", c.MountPath)
	} else {
		errs = append(errs, err)
		log.Error("fence could not unmount the volume: it is still mounted here; retrying", "error", err)
	}
	if len(errs) > 0 {
		fv.Error = errors.Join(errs...).Error()
	}
	fv.Done = time.Now().UTC()
	return fv
}

func (f *fencer) unmount(ctx context.Context, c *heldClaim) error {
	mm, err := f.a.mountManager(c.PluginID)
	if err != nil {
		return err
	}
	f.a.leaseFile.markStopping(c.AllocID, c.VolumeID)
	if err := mm.UnmountVolume(ctx, c.VolumeID, c.ExternalID, c.AllocID, c.usage()); err != nil {
		return err
	}
	return f.held.remove(c.AllocID, c.VolumeID)
}

// runHook runs the operator's fence command for one claim. It is given
// IDs and the mount path only, never a secret.
func (f *fencer) runHook(c *heldClaim, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(f.a.ctx, max(timeout, time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", f.command)
	cmd.Env = append(os.Environ(),
		"CLAIMD_ALLOC_ID="+c.AllocID, "CLAIMD_VOLUME_ID="+c.VolumeID,
		"CLAIMD_MOUNT_PATH="+c.MountPath, "CLAIMD_NODE_ID="+f.a.ident.ID)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 512 {
			out = out[:512]
		}
		return fmt.Errorf("fence command: %w (output: %q)", err, out)
	}
	return nil
}

// afterRenewal reports, once the servers answer again, the fenced
// allocations that they still consider running: the node will not run
// them again, and failing them lets the servers release their claims
// through the ordinary path (the node detach finds nothing mounted).
func (f *fencer) afterRenewal() {
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
	for _, id := range allocs {
		ctx, cancel := context.WithTimeout(f.a.ctx, 10*time.Second)
		var resp structs.AllocResponse
		err := f.a.conn.call(ctx, "Alloc.Get", &structs.AllocSpecificRequest{ID: id}, &resp)
		cancel()
		if err != nil {
			continue // the next renewal tries again
		}
		if resp.Alloc != nil && !resp.Alloc.Terminal() {
			ctx, cancel := context.WithTimeout(f.a.ctx, 10*time.Second)
			err = f.a.statuses.send(ctx, &structs.AllocClientUpdate{ID: id, ClientStatus: structs.AllocClientFailed,
				ClientDescription: "fenced: node lease ran out"})
			cancel()
			if err != nil {
				continue
			}
			f.a.logger.Warn("fenced allocation reported failed", "alloc", id)
		}
		f.mu.Lock()
		f.failedReported[id] = true
		f.mu.Unlock()
	}
	f.sweep()
}

// sweep unmounts held fence-policy claims whose allocation the servers
// ended (or no longer know): the workload is not meant to run, and a
// release that skipped the node detach will never ask for the unmount.
func (f *fencer) sweep() {
	f.mu.Lock()
	sweep := f.sweepHeld
	f.mu.Unlock()
	if !sweep {
		return
	}
	complete := true
	for _, c := range f.held.fenceable() {
		ctx, cancel := context.WithTimeout(f.a.ctx, 10*time.Second)
		var resp structs.AllocResponse
		err := f.a.conn.call(ctx, "Alloc.Get", &structs.AllocSpecificRequest{ID: c.AllocID}, &resp)
		cancel()
		if err != nil && !errors.Is(err, structs.ErrNotFound) {
			complete = false
			continue
		}
		if resp.Alloc != nil && !resp.Alloc.Terminal() {
			continue
		}
		ctx, cancel = context.WithTimeout(f.a.ctx, callTimeout)
		err = f.unmount(ctx, c)
		cancel()
		if err != nil {
			complete = false
			f.a.logger.Warn("could not unmount the volume of an ended allocation; retrying at the next renewal", "alloc", c.AllocID, "volume", c.VolumeID, "error", err)
			continue
		}
		f.a.logger.Info("unmounted the volume of an allocation that ended while this node was away", "alloc", c.AllocID, "volume", c.VolumeID)
	}
	if complete {
		f.mu.Lock()
		f.sweepHeld = false
		f.mu.Unlock()
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
