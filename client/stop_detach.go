package client

import (
	"context"
	"time"
)

// ownDetachTimeout bounds the agent's own unmount of one volume at an
// allocation's stop: past it the stop is reported without that volume and
// the servers' node detach (with its retries) does it.
const ownDetachTimeout = 10 * time.Second

// detachOwn node-detaches every volume this node holds for allocID, in the
// servers' order and with their code path (NodeDetachVolume): mark the
// claim stopping in the lease file (claimd exec ends the workload), unmount
// (NodeUnpublish, and NodeUnstage when no other held claim here uses the
// volume), drop the held record. It returns the volumes done; a failure
// only leaves its volume out (PROTOTYPE, branch i41n).
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
		uctx, cancel := context.WithTimeout(ctx, ownDetachTimeout)
		err = mm.UnmountVolume(uctx, h.VolumeID, h.ExternalID, allocID, h.usage())
		cancel()
		if err != nil {
			r.a.logger.Warn("own node detach failed; the servers will detach", "alloc", allocID, "volume", h.VolumeID, "error", err)
			continue
		}
		if err := r.a.held.remove(allocID, h.VolumeID); err != nil {
			// The unmount is done; a record left behind only delays a
			// later unstage (decision 60). Not said: the record disagrees.
			r.a.logger.Warn("could not update the held-claims record", "error", err)
			continue
		}
		done = append(done, h.VolumeID)
	}
	return done
}
