package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/internal/backoff"
	"github.com/claimd/claimd/structs"
)

// allocRunner watches this node's allocations by blocking query and runs
// one goroutine per allocation that still has work: claim and mount its
// volumes then report running, or report a stopped allocation complete.
type allocRunner struct {
	a *Agent

	mu      sync.Mutex
	running map[string]*allocTask
	// finished is the terminal status the servers' record showed for each
	// allocation of this node it still lists: a restored record that
	// shows one live again is told again (restore.go).
	finished map[string]structs.AllocClientStatus
	// rereporting: an end being reported again, not sent twice at once.
	rereporting map[string]bool
	// volumeWaits bounds the blocking queries on volumes (waitVolumeChange).
	volumeWaits chan struct{}
	wg          sync.WaitGroup
}

type allocTask struct {
	cancel context.CancelFunc
	// stopping: the task was started for a stop; a running task is
	// cancelled when the allocation is stopped.
	stopping bool
	// ran: the allocation was reported running by this agent (its
	// volumes mounted); reasserting: its claims are being re-reported
	// to servers that show it pending (restore.go).
	ran, reasserting bool
	// done is closed when the task's goroutine has ended: a stop task
	// unmounts only after a cancelled run task can mount no more.
	done chan struct{}
}

func newAllocRunner(a *Agent) *allocRunner {
	return &allocRunner{a: a, running: map[string]*allocTask{}, finished: map[string]structs.AllocClientStatus{}, rereporting: map[string]bool{},
		volumeWaits: make(chan struct{}, maxVolumeWaits)}
}

func (r *allocRunner) wait() { r.wg.Wait() }

func (r *allocRunner) run() {
	// The node authenticates with its secret, which the servers know only
	// once it has registered: watching before that is refused.
	select {
	case <-r.a.registeredCh:
	case <-r.a.ctx.Done():
		return
	}
	var index uint64
	pace := backoff.WithJitter(200*time.Millisecond, 5*time.Second)
	for {
		args := &structs.AllocListRequest{NodeID: r.a.ident.ID, QueryOptions: structs.QueryOptions{
			AllowStale: true, MinQueryIndex: index, MaxQueryTime: 5 * time.Minute}}
		var resp structs.AllocListResponse
		ctx, cancel := context.WithTimeout(r.a.ctx, 6*time.Minute)
		err := r.a.conn.call(ctx, "Alloc.List", args, &resp)
		cancel()
		if r.a.ctx.Err() != nil {
			return
		}
		if err != nil {
			logRetry(r.a.logger, err, "watching allocations failed; retrying", "error", err)
			wait := pace.Next()
			if after, ok := structs.RetryAfter(err); ok {
				// The server has no room for another waiting query now:
				// come back when it says (its hint is spread already).
				wait = max(wait, after)
			}
			if backoff.Sleep(r.a.ctx, wait) != nil {
				return
			}
			continue
		}
		pace.Reset()
		if resp.Index < index {
			// A stale server behind the one we watched before: start over.
			index = 0
		} else {
			index = resp.Index
		}
		r.reconcile(resp.Allocs)
	}
}

// reconcile starts a task for every allocation that needs one.
func (r *allocRunner) reconcile(allocs []*structs.Alloc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.olderRecord(allocs)
	for _, alloc := range allocs {
		if alloc.Terminal() {
			// What the record says of its end: only a restore makes a
			// terminal allocation live again.
			r.finished[alloc.ID] = alloc.ClientStatus
		} else if st, ok := r.finished[alloc.ID]; ok {
			// The record showed it ended; now it shows it live: a restored
			// (older) record. Tell it again how it ended.
			r.rereport(alloc.ID, st)
			continue
		}
		task, ok := r.running[alloc.ID]
		if alloc.Terminal() {
			if ok {
				// Done with it: forget the task so the map does not grow.
				task.cancel()
				delete(r.running, alloc.ID)
			}
			continue
		}
		switch {
		case alloc.DesiredStatus == structs.AllocDesiredStop:
			if ok && task.stopping {
				continue
			}
			var prev chan struct{}
			if ok {
				task.cancel() // stop claiming or mounting
				prev = task.done
			}
			r.startAfter(alloc, true, prev)
		case !ok && alloc.ClientStatus == structs.AllocClientPending:
			r.start(alloc, false)
		case ok && task.ran && !task.reasserting && alloc.ClientStatus == structs.AllocClientPending:
			// Running here, pending on the servers: their record is
			// older than this node (a snapshot restore).
			task.reasserting = true
			r.reassert(alloc, task)
		}
	}
}

func (r *allocRunner) start(alloc *structs.Alloc, stop bool) { r.startAfter(alloc, stop, nil) }

// startAfter is start once the task whose done channel is prev (nil: none)
// has ended.
func (r *allocRunner) startAfter(alloc *structs.Alloc, stop bool, prev chan struct{}) {
	ctx, cancel := context.WithCancel(r.a.ctx)
	task := &allocTask{cancel: cancel, stopping: stop, done: make(chan struct{})}
	r.running[alloc.ID] = task
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(task.done)
		defer cancel()
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
				return
			}
		}
		var done bool
		if stop {
			done = r.stop(ctx, alloc)
		} else {
			done = r.runAlloc(ctx, alloc)
		}
		r.mu.Lock()
		task.ran = done && !stop
		if r.running[alloc.ID] == task && !done {
			// Let the next reconcile start it again.
			delete(r.running, alloc.ID)
		}
		r.mu.Unlock()
	}()
}

// runAlloc claims and mounts every volume, then reports running. A
// retryable refusal (the volume is still held: max_claims; the plugin is
// not healthy yet: unschedulable) is retried with capped backoff; a
// permanent one fails the allocation.
func (r *allocRunner) runAlloc(ctx context.Context, alloc *structs.Alloc) bool {
	log := r.a.logger.With("alloc", alloc.ID)
	if r.a.fence.fencedAlloc(alloc.ID) {
		// A fenced node does not mount again on its own (decision 39).
		log.Warn("allocation was fenced; not starting it again")
		return r.report(ctx, alloc.ID, structs.AllocClientFailed, "fenced: node lease ran out")
	}
	for _, req := range alloc.Volumes {
		if err := r.claimAndMount(ctx, alloc, req); err != nil {
			if ctx.Err() != nil {
				return false
			}
			if r.stopRequested(ctx, alloc.ID) || ctx.Err() != nil {
				// Stopped while we claimed (the claim was refused for
				// that), or this task was cancelled while it asked (the
				// stop's reconcile cancels it): no failure. The stop task
				// reports it complete.
				log.Info("allocation stopped while starting", "volume", req.VolumeID, "error", err)
				return false
			}
			log.Error("allocation failed", "volume", req.VolumeID, "error", err)
			return r.report(ctx, alloc.ID, structs.AllocClientFailed, err.Error())
		}
	}
	log.Info("allocation running", "volumes", len(alloc.Volumes))
	return r.report(ctx, alloc.ID, structs.AllocClientRunning, "")
}

// stopRequested reports whether the allocation has been asked to stop
// since this task started. The task learns of a stop only from the next
// blocking-query answer, so a claim sent just after the stop committed is
// refused ("is being stopped") before the task is cancelled; reporting
// that as a failure would make a stopped allocation end failed (the first
// terminal status stands).
// A read that fails is tried again a few times: the servers may be
// electing a leader just then.
func (r *allocRunner) stopRequested(ctx context.Context, allocID string) bool {
	pace := backoff.WithJitter(200*time.Millisecond, 2*time.Second)
	for attempt := 0; attempt < 5; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var resp structs.AllocResponse
		err := r.a.conn.call(cctx, "Alloc.Get", &structs.AllocSpecificRequest{ID: allocID}, &resp)
		cancel()
		if err == nil {
			return resp.Alloc != nil && resp.Alloc.DesiredStatus == structs.AllocDesiredStop
		}
		if backoff.Sleep(ctx, pace.Next()) != nil {
			return false
		}
	}
	return false
}

func (r *allocRunner) claimAndMount(ctx context.Context, alloc *structs.Alloc, req *structs.AllocVolumeRequest) error {
	mode := structs.ClaimModeWrite
	if req.ReadOnly {
		mode = structs.ClaimModeRead
	}
	// After the first refusal for max_claims (answered at once, so the
	// allocation says at once what it waits for), claims carry Wait: the
	// leader holds the refusal until the volume changes (at most
	// MaxClaimWait), so the claim is granted as the holder's release
	// frees it (issue 41).
	claimReq := &structs.VolumeClaimRequest{VolumeID: req.VolumeID, AllocID: alloc.ID, NodeID: r.a.ident.ID, Mode: mode}
	claimBackoff := backoff.WithJitter(250*time.Millisecond, 10*time.Second)
	mountBackoff := backoff.WithJitter(250*time.Millisecond, 10*time.Second)
	var waitingFor string // the reason last shown on the allocation
	var volIndex uint64   // the volume's index last seen waiting for it
	for {
		// Every mount attempt follows a claim that is live now (a re-claim
		// of a live claim answers the same claim): a retry after a failed
		// mount must not mount a volume whose claim the servers released
		// meanwhile (the allocation was stopped while the plugin was away,
		// and its node detach already ran).
		var claim structs.VolumeClaimResponse
		sent := time.Now()
		err := r.a.conn.call(ctx, "Volume.Claim", claimReq, &claim)
		if err != nil {
			if !retryableClaimError(err) {
				return structs.Wrap(err, fmt.Sprintf("claim volume %q", req.VolumeID))
			}
			r.a.logger.Debug("claim not granted yet; retrying", "alloc", alloc.ID, "volume", req.VolumeID, "error", err)
			// Say on the allocation what it waits for (once per reason: a
			// best-effort status, the claim's retry does not wait for it).
			if why := fmt.Sprintf("waiting for volume %q: %v", req.VolumeID, err); why != waitingFor && len(why) <= 4096 {
				waitingFor = why
				_ = r.a.statuses.send(ctx, &structs.AllocClientUpdate{ID: alloc.ID,
					ClientStatus: structs.AllocClientPending, ClientDescription: why})
			}
			if errors.Is(err, structs.ErrMaxClaims) && claimReq.Wait > 0 && time.Since(sent) >= structs.MaxClaimWait/2 {
				// The leader held it for the whole wait: nothing changed,
				// ask again at once (it waits again).
				continue
			}
			if errors.Is(err, structs.ErrMaxClaims) && claimReq.Wait == 0 {
				// The first refusal: from now on the leader waits.
				claimReq.Wait = structs.MaxClaimWait
				continue
			}
			// An older leader answers at once: wait on the volume here.
			if errors.Is(err, structs.ErrMaxClaims) && r.waitVolumeChange(ctx, req.VolumeID, &volIndex) {
				// The volume's claims changed (its holder's release went a
				// step, or freed it): claim again at once.
				continue
			}
			if backoff.Sleep(ctx, claimBackoff.Next()) != nil {
				return ctx.Err()
			}
			continue
		}
		claimBackoff.Reset()
		// The claim answer carries the volume with its secrets (NodeStage
		// may need them); read endpoints never return secrets.
		vol := claim.Volume
		if vol == nil {
			return structs.NewError(structs.CodeUnavailable, fmt.Sprintf("claim of volume %q came back without the volume", req.VolumeID))
		}
		mm, err := r.a.mountManager(vol.PluginID)
		if err != nil {
			return err
		}
		var pctx map[string]string
		policy := vol.NodeLost
		if claim.Claim != nil {
			pctx = claim.Claim.PublishContext
			policy = claim.Claim.NodeLost
		}
		err = r.mountHeld(ctx, mm, vol, alloc.ID, req.ReadOnly, pctx, policy)
		if err == nil {
			return nil
		}
		if !errors.Is(err, structs.ErrUnavailable) && !errors.Is(err, structs.ErrTimeout) {
			return structs.Wrap(err, fmt.Sprintf("mount volume %q", req.VolumeID))
		}
		r.a.logger.Warn("mount failed; retrying", "alloc", alloc.ID, "volume", req.VolumeID, "error", err)
		if backoff.Sleep(ctx, mountBackoff.Next()) != nil {
			return ctx.Err()
		}
	}
}

// mountHeld mounts a claimed volume with the node's held-claims record
// written first, so that a fence running meanwhile knows of it. A volume
// under the fence policy is mounted only while the node's lease holds,
// and a mount a fence overtook is undone.
func (r *allocRunner) mountHeld(ctx context.Context, mm *csi.MountManager, vol *structs.Volume, allocID string,
	readOnly bool, pctx map[string]string, policy structs.NodeLostPolicy) error {
	gen, err := r.a.fence.mountAllowed(policy)
	if err != nil {
		return err
	}
	held := &heldClaim{AllocID: allocID, VolumeID: vol.ID, PluginID: vol.PluginID, ExternalID: vol.ExternalID,
		ReadOnly: readOnly, AccessMode: vol.AccessMode, AttachmentMode: vol.AttachmentMode,
		MountOptions: vol.MountOptions, NodeLost: policy}
	// The mount path is known before the mount: one write records the
	// claim with it (a write per mount step showed in the handoff of many
	// volumes at once).
	held.MountPath = mm.TargetPath(vol.ID, allocID, held.usage())
	if err := r.a.held.add(held); err != nil {
		return err
	}
	info, err := r.mountToTheEnd(ctx, mm, vol, allocID, readOnly, pctx)
	if err != nil {
		return err
	}
	if info.Source != held.MountPath {
		held.MountPath = info.Source
		if err := r.a.held.add(held); err != nil {
			return err
		}
	}
	if !r.a.fence.mountStillValid(gen) {
		uctx, cancel := context.WithTimeout(r.a.ctx, callTimeout)
		defer cancel()
		if err := mm.UnmountVolume(uctx, vol.ID, vol.ExternalID, allocID, held.usage()); err == nil {
			_ = r.a.held.remove(allocID, vol.ID)
		}
		return structs.NewError(structs.CodeUnavailable, "the node fenced itself while the volume was being mounted")
	}
	return nil
}

// mountToTheEnd is MountVolume that an allocation's stop does not cut short
// once the plugin has been called: the stop's own unmount (decision 61)
// must come after the plugin has finished the publish, since a cancelled
// gRPC call may still be running in the plugin and the CSI spec lets a
// plugin expect one call per volume at a time. Only the agent's shutdown
// and the call timeout end it. A mount that completes after the stop is
// undone by the stop task, which starts only once this task has ended.
func (r *allocRunner) mountToTheEnd(ctx context.Context, mm *csi.MountManager, vol *structs.Volume, allocID string,
	readOnly bool, pctx map[string]string) (*csi.MountInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithTimeout(r.a.ctx, callTimeout)
	defer cancel()
	return mm.MountVolume(mctx, vol, allocID, readOnly, pctx)
}

// retryableClaimError: the claim may succeed later. A server that answers
// "shutting down" is going away, not refusing: the next call goes to
// another server (failing the allocation for it made a server restart fail
// every allocation whose claim was in flight to it). Unschedulable is
// retried (a node or plugin coming back heals it) except a topology
// refusal: the node cannot reach the volume, and retrying would hold the
// allocation pending forever.
func retryableClaimError(err error) bool {
	if structs.IsTopologyRefusal(err) {
		return false
	}
	return structs.IsRetryable(err) || errors.Is(err, structs.ErrUnschedulable) || errors.Is(err, structs.ErrShutdown)
}

// stop reports a stopped allocation complete. It first node-detaches the
// volumes it holds for the allocation itself and says so in the report
// (stop_detach.go, decision 61); a volume it could not unmount is left to
// the servers' node detach, as every volume was before.
func (r *allocRunner) stop(ctx context.Context, alloc *structs.Alloc) bool {
	detached := r.detachOwn(ctx, alloc.ID)
	return r.reportDetached(ctx, alloc.ID, structs.AllocClientComplete, "stopped", detached)
}

// report sends a client status, retrying until it lands or the agent stops.
func (r *allocRunner) report(ctx context.Context, allocID string, status structs.AllocClientStatus, desc string) bool {
	return r.reportDetached(ctx, allocID, status, desc, nil)
}

// reportDetached is report with the volumes the node detached itself.
func (r *allocRunner) reportDetached(ctx context.Context, allocID string, status structs.AllocClientStatus, desc string, detached []string) bool {
	update := &structs.AllocClientUpdate{ID: allocID, ClientStatus: status, ClientDescription: desc, DetachedVolumes: detached}
	pace := backoff.WithJitter(200*time.Millisecond, 5*time.Second)
	for {
		err := r.a.statuses.send(ctx, update)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			// The task was cancelled: the allocation ended meanwhile (the
			// record shows this very status, or a later one), or the agent
			// stops. Nothing failed.
			return false
		}
		r.a.logger.Warn("reporting allocation status failed; retrying", "alloc", allocID, "status", status, "error", err)
		if backoff.Sleep(ctx, pace.Next()) != nil {
			return false
		}
	}
}

// maxVolumeWaits is half the servers' bound on one node's reads in flight
// (endpoints/query_gate.go): the rest stay for the node's other reads.
const maxVolumeWaits = 32

// waitVolumeChange waits, by a blocking query, for the volume's state to
// change past *index (a release step or the release of its holder), so
// that a claim refused for max_claims is tried again when the volume may
// be free rather than on a timer (issue 41). The first call reads the
// index and returns at once. It reports false when the query failed or
// answered at once with nothing new (an older server): the caller then
// falls back to its backoff.
func (r *allocRunner) waitVolumeChange(ctx context.Context, volID string, index *uint64) bool {
	// The servers bound a node's reads in flight (64): at most
	// maxVolumeWaits of them wait on volumes, the other waiters use the
	// backoff, and a read refused with a retry-after hint is not waited
	// out here (the backoff is shorter).
	select {
	case r.volumeWaits <- struct{}{}:
		defer func() { <-r.volumeWaits }()
	default:
		return false
	}
	args := &structs.VolumeSpecificRequest{ID: volID, NodeID: r.a.ident.ID, QueryOptions: structs.QueryOptions{
		AllowStale: true, MinQueryIndex: *index, MaxQueryTime: 30 * time.Second}}
	var resp structs.VolumeResponse
	cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	began := time.Now()
	args.AuthToken = r.a.ident.Secret
	if err := r.a.conn.callOnce(cctx, "Volume.Get", args, &resp); err != nil {
		return false
	}
	first := *index == 0
	changed := resp.Index > *index
	*index = resp.Index
	if first {
		return true
	}
	// Unchanged after a full wait is a timeout: try the claim again (as
	// the backoff would); unchanged at once is a server that does not
	// block: back off.
	return changed || time.Since(began) > 10*time.Second
}
