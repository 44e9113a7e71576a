package client

import (
	"context"
	"time"

	"github.com/claimd/claimd/internal/backoff"
	"github.com/claimd/claimd/internal/faultpoint"
)

// DefaultOwnDetachTimeout bounds the agent's own unmount of one volume at
// an allocation's stop, retries included, when Config.OwnDetachTimeout is
// 0: past it the stop is reported without that volume and the servers'
// node detach (with its retries) does it. Long enough for a workload to
// end on its stopping mark and for a restarting plugin to come back.
const DefaultOwnDetachTimeout = 10 * time.Second

// ownDetachTimeout is this agent's bound (-own-detach-timeout).
func (a *Agent) ownDetachTimeout() time.Duration {
	if a.cfg.OwnDetachTimeout > 0 {
		return a.cfg.OwnDetachTimeout
	}
	return DefaultOwnDetachTimeout
}

// The fault points of the own node detach (internal/faultpoint: a test
// stops the agent process there, then kills it with SIGKILL or resumes it
// after a pause): before the unmount, between it and the held record's
// drop, and between that and the report.
const (
	// pointOwnMarked: the claim is marked stopping in the lease file, the
	// volume not yet unmounted.
	pointOwnMarked = "own-detach:marked-stopping"
	// pointOwnUnmounted: a volume is unmounted, its held record not yet
	// dropped.
	pointOwnUnmounted = "own-detach:unmounted"
	// pointOwnRecordsDropped: the allocation's volumes are unmounted and
	// their held records dropped; the terminal report is not yet sent.
	pointOwnRecordsDropped = "own-detach:records-dropped"
)

// detachOwn node-detaches every volume this node holds for allocID, in the
// servers' order and with their code path (NodeDetachVolume): mark the
// claim stopping in the lease file (claimd exec ends the workload), unmount
// (NodeUnpublish, and NodeUnstage when no other held claim here uses the
// volume), drop the held record. It returns the volumes done; a failure
// only leaves its volume out, and the servers' node detach does it.
//
// Crash safety (integration/own_detach_crash_test.go): a kill between any
// two of these steps leaves the claim live on the servers (no report was
// sent) and the allocation desired-stop, so the restarted agent runs this
// again: an unmount already done finds nothing mounted (seed 6), and a
// record already dropped leaves nothing to state, so that volume goes
// without the statement and takes the servers' (no-op) node detach. A
// pause past the heartbeat TTL makes the allocation lost first; the late
// report is then ignored (the first terminal status stands) and the
// servers' path releases the claim.
func (r *allocRunner) detachOwn(ctx context.Context, allocID string) []string {
	var done []string
	for _, h := range r.a.held.list() {
		if h.AllocID != allocID {
			continue
		}
		mm, err := r.a.mountManager(h.PluginID)
		if err != nil {
			r.a.logger.Warn("own node detach: no mount manager; the servers will detach", "alloc", allocID, "volume", h.VolumeID, "error", err)
			continue
		}
		r.a.leaseFile.markStopping(allocID, h.VolumeID)
		faultpoint.Stop(pointOwnMarked)
		err = unmountRetrying(ctx, r.a.ownDetachTimeout(), func(uctx context.Context) error {
			return mm.UnmountVolume(uctx, h.VolumeID, h.ExternalID, allocID, h.usage())
		})
		countOwnDetach(h.PluginID, err)
		if err != nil {
			r.a.logger.Warn("own node detach failed; the servers will detach", "alloc", allocID, "volume", h.VolumeID, "error", err)
			continue
		}
		faultpoint.Stop(pointOwnUnmounted)
		if err := r.a.held.remove(allocID, h.VolumeID); err != nil {
			// The unmount is done; a record left behind only delays a
			// later unstage (decision 60). Not said: the record disagrees.
			r.a.logger.Warn("could not update the held-claims record", "error", err)
			continue
		}
		r.a.logger.Info("own node detach done", "alloc", allocID, "volume", h.VolumeID)
		done = append(done, h.VolumeID)
	}
	if len(done) > 0 {
		faultpoint.Stop(pointOwnRecordsDropped)
	}
	return done
}

// unmountRetrying runs unmount until it succeeds or timeout (the agent's
// own-detach timeout) has passed. The first try usually comes while the
// workload still runs: claimd exec sees the claim marked stopping within
// 100 ms and then ends its process group, and a mount it holds open is
// busy until then. A plugin that is restarting gets the same few seconds.
// Repeating an unmount is harmless (seed 6).
func unmountRetrying(ctx context.Context, timeout time.Duration, unmount func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pace := backoff.WithJitter(100*time.Millisecond, time.Second)
	for {
		err := unmount(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if backoff.Sleep(ctx, pace.Next()) != nil {
			return err
		}
	}
}
