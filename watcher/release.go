package watcher

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/claimd/claimd/attachment"
	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/structs"
)

// permanentError ends the retries of a volume's evals: they are marked
// failed with the reason.
type permanentError struct{ reason string }

func (e *permanentError) Error() string { return e.reason }

// releaseVolume moves every past claim of one volume as far as it can go
// in one pass: node detach, then controller detach, then free. It returns
// nil when the volume has no past claims left. Each step is a checkpoint
// with the state it expects, so a step that another leader already took is
// refused (conflict) rather than repeated, and the next pass re-reads.
// queuedAt is when the volume was queued for this pass: the release clock
// of a past claim first seen here starts then.
func (w *Watcher) releaseVolume(volID string, queuedAt time.Time) error {
	// The lease before the read: every step below is decided on state
	// read within it, and made only while it holds (decision 46).
	g, err := w.attach.Begin()
	if err != nil {
		return err
	}
	state := w.state.State()
	vol, err := state.VolumeByID(nil, volID)
	if err != nil {
		return err
	}
	if vol == nil {
		return &permanentError{reason: fmt.Sprintf("volume %q was deregistered; nothing can be released", volID)}
	}
	if len(vol.PastClaims) == 0 {
		return nil
	}
	w.clock.observe(volID, structs.SortedKeys(vol.PastClaims), queuedAt)
	plug, err := state.PluginSummary(nil, vol.PluginID)
	if err != nil {
		return err
	}
	if plug == nil {
		// No node runs the plugin any more, as node or controller: nothing
		// can unmount or detach. Stop retrying and say why; the claim GC
		// gives the volume a new eval on its next run, and an operator can
		// force the claims.
		return &permanentError{reason: fmt.Sprintf("plugin %q has no instances left on any node; "+
			"the past claims cannot be released (use `claimd volume detach -force`)", vol.PluginID)}
	}
	var errs []error

	// 1. Node detach every claim still unpublishing (S3: before any
	// controller detach of the same claim). When the plugin has no
	// controller, nothing is left to do after it: one checkpoint records
	// the node detach and frees the claim.
	for _, c := range sortedPast(vol) {
		if c.State.Rank() >= structs.ClaimStateNodeDetached.Rank() {
			continue
		}
		fencedAt, err := w.nodeDetach(g, vol, c)
		if !fencedAt.IsZero() {
			countFenced(vol.PluginID)
		} else {
			countStep(vol.PluginID, stepNodeDetach, err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("alloc %s on node %s: node detach: %w", c.AllocID, c.NodeID, err))
			continue
		}
		next := structs.ClaimStateNodeDetached
		if !plug.ControllerRequired {
			next = structs.ClaimStateFreed
		}
		if !fencedAt.IsZero() {
			w.logger.Warn("node lost and its lease ran out: the claim is fenced, skipping its node detach",
				"volume", vol.ID, "alloc", c.AllocID, "node", c.NodeID, "lease_expired_at", fencedAt)
		}
		if err := w.checkpointFenced(c, next, fencedAt); err != nil {
			errs = append(errs, err)
		} else if next == structs.ClaimStateFreed {
			w.clock.freed(volID, c.AllocID, vol.PluginID)
		}
	}

	// 2. Controller detach the node-detached claims and free them: freed
	// follows the detach with nothing between, so it is one checkpoint
	// (controller-detached is passed through, not stopped at).
	if vol, err = state.VolumeByID(nil, volID); err != nil || vol == nil {
		return errors.Join(append(errs, err)...)
	}
	for _, c := range sortedPast(vol) {
		if c.State == structs.ClaimStateNodeDetached {
			err := w.controllerDetach(g, vol, c)
			countStep(vol.PluginID, stepControllerDetach, err)
			if err != nil {
				errs = append(errs, fmt.Errorf("alloc %s on node %s: controller detach: %w", c.AllocID, c.NodeID, err))
				continue
			}
		}
		if c.State.Rank() >= structs.ClaimStateNodeDetached.Rank() {
			if err := w.checkpoint(c, structs.ClaimStateFreed, false); err != nil {
				errs = append(errs, err)
			} else {
				w.clock.freed(volID, c.AllocID, vol.PluginID)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if vol, err = state.VolumeByID(nil, volID); err != nil {
		return err
	}
	if vol != nil && len(vol.PastClaims) > 0 {
		return fmt.Errorf("%d past claims remain", len(vol.PastClaims))
	}
	return nil
}

func sortedPast(v *structs.Volume) []*structs.Claim {
	out := make([]*structs.Claim, 0, len(v.PastClaims))
	for _, id := range structs.SortedKeys(v.PastClaims) {
		out = append(out, v.PastClaims[id])
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].AllocID < out[j].AllocID })
	return out
}

// nodeDetach asks the claim's node to unpublish (and unstage when no other
// allocation there uses the volume). A node that is down or gone cannot
// unmount, and detaching its controller attachment anyway risks corrupting
// data, so by default (node_lost wait) the claim waits for the node, or for
// an operator's -force. Under node_lost fence it waits for the node's lease
// to run out instead, and then returns when it did (fencedAt): the node has
// stopped the workload and unmounted by itself, and the caller records the
// claim as fenced. Under node_lost manual a lost node's claim waits for an
// operator's `volume detach`, even once the node is back.
func (w *Watcher) nodeDetach(g *leaderlease.Grant, vol *structs.Volume, c *structs.Claim) (fencedAt time.Time, err error) {
	state := w.state.State()
	node, err := state.NodeByID(nil, c.NodeID)
	if err != nil {
		return time.Time{}, err
	}
	if node != nil {
		if err := otherIdentity(state, vol, c); err != nil {
			return time.Time{}, err
		}
	}
	policy := structs.EffectiveNodeLost(c, vol)
	if policy == structs.NodeLostManual && !c.OperatorReleased && w.lostClaim(c, node) {
		return time.Time{}, fmt.Errorf("node %s was lost and volume %s is node_lost manual: waiting for an operator (`claimd volume detach %s %s`)",
			c.NodeID, vol.ID, vol.ID, c.NodeID)
	}
	if node == nil {
		return time.Time{}, fmt.Errorf("node %s is deregistered; waiting (an operator can run `claimd volume detach -force %s %s`)", c.NodeID, vol.ID, c.NodeID)
	}
	if policy == structs.NodeLostFence && node.Lease > 0 && w.leases != nil {
		return w.fenceOrDetach(g, vol, c, node)
	}
	if node.Status != structs.NodeStatusReady {
		if policy == structs.NodeLostFence {
			return w.leaseRanOut(vol, c, node)
		}
		return time.Time{}, fmt.Errorf("node %s is %s; waiting for it to come back", c.NodeID, node.Status)
	}
	return time.Time{}, w.detachOnNode(g, vol, c)
}

func (w *Watcher) detachOnNode(g *leaderlease.Grant, vol *structs.Volume, c *structs.Claim) error {
	req := &structs.ClientCSINodeDetachRequest{
		NodeID: c.NodeID, PluginID: vol.PluginID, VolumeID: vol.ID, ExternalID: vol.ExternalID,
		AllocID: c.AllocID, AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode,
		ReadOnly: c.Mode == structs.ClaimModeRead,
	}
	return w.attach.NodeDetach(g, req, &structs.ClientCSINodeDetachResponse{})
}

// fenceOrDetach releases a fence-policy claim of a node that holds a
// lease. The lease decides, not the node's status: once this leader's
// lease clock says the lease certainly ran out, the node has fenced
// itself, whether or not it has been marked down yet (the down mark comes
// after the heartbeat TTL and grace, which may be longer than the lease),
// and the claim is fenced. Until then a ready node detaches as any other;
// when it cannot (it is cut off, its plugin fails), the retry comes when
// the lease runs out, not on the backoff, so the bound stays
// structs.LeaseExpiry after the last heartbeat. A node that heartbeats
// keeps its lease live and is only ever node-detached.
func (w *Watcher) fenceOrDetach(g *leaderlease.Grant, vol *structs.Volume, c *structs.Claim, node *structs.Node) (time.Time, error) {
	at, expired := w.leases.LeaseExpiry(node.ID, node.Lease)
	if at.IsZero() {
		if node.Status == structs.NodeStatusReady {
			// No lease clock (yet): a ready node detaches as before.
			return time.Time{}, w.detachOnNode(g, vol, c)
		}
		return time.Time{}, fmt.Errorf("node %s is %s; this server is not counting leases (not leading)", c.NodeID, node.Status)
	}
	if expired {
		if node.Status == structs.NodeStatusReady {
			// The state machine takes a fenced checkpoint only for a node
			// that is not ready (a node that is back detaches for itself):
			// mark it down first, as its heartbeat timer is about to.
			if err := w.markLeaseLost(node.ID); err != nil {
				return time.Time{}, err
			}
		}
		return at.Round(0).UTC(), nil
	}
	if node.Status != structs.NodeStatusReady {
		return time.Time{}, &leaseWait{node: node.ID, at: at}
	}
	if err := w.detachOnNode(g, vol, c); err != nil {
		return time.Time{}, &leaseWait{node: node.ID, at: at, cause: err}
	}
	return time.Time{}, nil
}

// markLeaseLost marks a node whose lease ran out down. Only the leader
// counts leases, and it does not renew one any more once it ran out on
// its clock: a node that heartbeats again re-registers ready.
func (w *Watcher) markLeaseLost(nodeID string) error {
	w.logger.Warn("node's lease ran out on the leader's clock and it is not marked down yet; marking it down", "node", nodeID)
	req := &structs.NodeUpdateStatusRequest{NodeID: nodeID, Status: structs.NodeStatusDown}
	if _, _, err := w.apply.Apply(structs.NodeUpdateStatusRequestType, req); err != nil {
		return fmt.Errorf("marking node %s down after its lease ran out: %w", nodeID, err)
	}
	return nil
}

// lostClaim: the claim's allocation was lost with its node (or the node
// is gone or down), as opposed to stopped.
func (w *Watcher) lostClaim(c *structs.Claim, node *structs.Node) bool {
	if node == nil || node.Status != structs.NodeStatusReady {
		return true
	}
	alloc, err := w.state.State().AllocByID(nil, c.AllocID)
	return err != nil || alloc == nil || alloc.ClientStatus == structs.AllocClientLost
}

// leaseWait is a release waiting for a node's lease to run out; the
// worker retries right when it does. cause is the node detach that failed
// meanwhile (nil: the node is lost, nothing to try before the lease).
type leaseWait struct {
	node  string
	at    time.Time
	cause error
}

func (e *leaseWait) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%v (node_lost fence: retried by %s at the latest, when node %s's lease runs out, then its node detach is skipped)",
			e.cause, e.at.UTC().Format(time.RFC3339Nano), e.node)
	}
	return fmt.Sprintf("node %s is lost; its lease runs out at %s (node_lost fence), then its node detach is skipped",
		e.node, e.at.UTC().Format(time.RFC3339Nano))
}

func (e *leaseWait) Unwrap() error { return e.cause }

// leaseRanOut returns when the lost node's lease ran out, or a leaseWait
// until it does. A node without a lease never fenced anything: its claims
// wait like wait-policy ones.
func (w *Watcher) leaseRanOut(vol *structs.Volume, c *structs.Claim, node *structs.Node) (time.Time, error) {
	if node.Lease <= 0 {
		return time.Time{}, fmt.Errorf("node %s is %s and holds no lease (its agent runs without -node-lease), so it never fences: waiting for it to come back", c.NodeID, node.Status)
	}
	if w.leases == nil {
		return time.Time{}, fmt.Errorf("node %s is %s; no lease clock on this server, waiting", c.NodeID, node.Status)
	}
	at, expired := w.leases.LeaseExpiry(node.ID, node.Lease)
	if at.IsZero() {
		return time.Time{}, fmt.Errorf("node %s is %s; this server is not counting leases (not leading)", c.NodeID, node.Status)
	}
	if !expired {
		return time.Time{}, &leaseWait{node: node.ID, at: at}
	}
	// Strip the monotonic reading: the time goes into the log.
	return at.Round(0).UTC(), nil
}

// controllerDetach unpublishes the volume from the claim's node (package
// attachment decides whether the node still needs it, S4). A volume gone
// from the state ends the retries.
func (w *Watcher) controllerDetach(g *leaderlease.Grant, vol *structs.Volume, c *structs.Claim) error {
	err := w.attach.Unpublish(g, vol, c)
	if errors.Is(err, attachment.ErrVolumeDeregistered) {
		return &permanentError{reason: fmt.Sprintf("volume %q was deregistered; nothing can be released", vol.ID)}
	}
	return err
}

// checkpointFenced is checkpoint after a node detach, or after a fence
// when fencedAt is set (the lease ran out then).
func (w *Watcher) checkpointFenced(c *structs.Claim, state structs.ClaimState, fencedAt time.Time) error {
	if fencedAt.IsZero() {
		return w.checkpoint(c, state, true)
	}
	req := &structs.ClaimCheckpointRequest{VolumeID: c.VolumeID, AllocID: c.AllocID, State: state,
		ExpectedState: c.State, Fenced: true, LeaseExpiredAt: fencedAt}
	if _, _, err := w.apply.Checkpoint(req); err != nil {
		return fmt.Errorf("checkpoint %s/%s %s→%s (fenced): %w", c.VolumeID, c.AllocID, c.State, state, err)
	}
	return nil
}

// checkpoint records that a claim reached state, as a compare-and-set on
// the state the worker saw; nodeDetached says the worker has just done the
// claim's node detach.
func (w *Watcher) checkpoint(c *structs.Claim, state structs.ClaimState, nodeDetached bool) error {
	req := &structs.ClaimCheckpointRequest{VolumeID: c.VolumeID, AllocID: c.AllocID, State: state,
		ExpectedState: c.State, NodeDetached: nodeDetached}
	if _, _, err := w.apply.Checkpoint(req); err != nil {
		return fmt.Errorf("checkpoint %s/%s %s→%s: %w", c.VolumeID, c.AllocID, c.State, state, err)
	}
	w.logger.Debug("claim checkpoint", "volume", c.VolumeID, "alloc", c.AllocID, "node", c.NodeID, "from", c.State, "to", state)
	return nil
}
