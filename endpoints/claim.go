package endpoints

import (
	"context"
	"errors"
	"fmt"
	memdb "github.com/hashicorp/go-memdb"
	"time"

	"github.com/claimd/claimd/structs"
)

// Claim claims a volume for an allocation, or releases the allocation's
// claim (Release: true): one RPC for both (seed 3). At the leader, claims
// that arrive together are committed as one claim batch entry. A new claim
// on a plugin that needs a controller is then published by a controller
// (ControllerPublish only for new claims, never for a release: S5), and the
// publish context is stored on the claim.
func (v *Volume) Claim(args *structs.VolumeClaimRequest, reply *structs.VolumeClaimResponse) error {
	// A client agent claims and releases only for allocations on its own
	// node (see claimNode). Checked before validation, like every call: a
	// caller that may not make it learns nothing from its arguments.
	c, done, err := v.auth.gate("Volume.Claim", args, reply, v.auth.forNode("Volume.Claim", func() (string, bool) { return claimNode(v.srv, args) }))
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	if args.NodeDetached {
		holderDetached(c, v.srv, args)
	}
	// The token and the origin have done their work: neither is written
	// to the log.
	args.AuthToken, args.Origin = "", structs.CallOrigin{}
	if !args.Release {
		if err := refuseIfAbnormal(v.srv.State(), args); err != nil {
			return err
		}
	}
	// The wait is the leader's to do, never written to the log.
	wait := min(max(args.Wait, 0), structs.MaxClaimWait)
	args.Wait = 0
	deadline := time.Now().Add(wait)
	var res *structs.ClaimResult
	var index uint64
	for {
		res, index, err = v.srv.SubmitClaim(args)
		if err != nil {
			return err
		}
		if rerr := res.Err(); wait > 0 && !args.Release && errors.Is(rerr, structs.ErrMaxClaims) && v.volumeChanged(args.VolumeID, index, deadline) {
			continue // the holder's claim moved on: try again at once
		}
		break
	}
	reply.Index = index
	if err := res.Err(); err != nil {
		return err
	}
	reply.Claim = res.Claim
	reply.New = res.New
	if args.Release || res.Claim == nil {
		return nil
	}
	if vol, err := v.srv.State().VolumeByID(nil, args.VolumeID); err == nil && vol != nil {
		// The spec without its claims: a shallow copy, since stored
		// objects are never modified and the reply is only encoded (a deep
		// copy cost O(claims on the volume) per claim).
		spec := *vol
		spec.ReadClaims, spec.WriteClaims, spec.PastClaims = nil, nil, nil
		// The volume's secrets go only to the node that holds the claim,
		// authenticated by its node secret.
		if !c.isNode(res.Claim.NodeID) {
			spec.Secrets = nil
		}
		reply.Volume = &spec
	}
	return v.ensurePublished(res.Claim, reply)
}

// ensurePublished makes sure a live claim on a plugin that needs a
// controller has been controller-published before the node may stage it
// (package attachment decides, under the lock the release path takes too).
// What this path adds is the Raft side: the publish recorded on the claim,
// and a claim whose publish failed released at once so that the
// server-driven detach cleans up whatever the plugin half did.
func (v *Volume) ensurePublished(claim *structs.Claim, reply *structs.VolumeClaimResponse) error {
	published, err := v.srv.Attachments.Publish(claim,
		func(publishContext map[string]string) error { return v.recordPublished(claim, publishContext, reply) },
		func() {
			release := &structs.VolumeClaimRequest{VolumeID: claim.VolumeID, AllocID: claim.AllocID, Release: true}
			if _, _, rerr := v.srv.SubmitClaim(release); rerr != nil {
				v.srv.Logger.Error("releasing a claim whose controller publish failed", "volume", claim.VolumeID,
					"alloc", claim.AllocID, "error", rerr)
			}
		})
	if published != nil {
		reply.Claim = published
	}
	return afterCommit(claim, err)
}

// afterCommit is the answer to a claim whose entry is already in the log
// when its publish step failed. no_leader tells a caller, the forwarder and
// the Go client that nothing was applied (they send it again on that word
// alone); here the claim was taken, and only the controller publish (or its
// record) was not made because this server stopped leading. So that answer
// becomes unavailable, an outcome the caller must find out, naming the
// controller publish: a client agent claims again and the next leader
// publishes. Found by the chaos suite: a no_leader that the Go client
// retried until every server refused the dial read as a definite refusal
// of a claim that was held.
func afterCommit(claim *structs.Claim, err error) error {
	if err == nil || !errors.Is(err, structs.ErrNoLeader) {
		return err
	}
	return structs.NewError(structs.CodeUnavailable, fmt.Sprintf(
		"the claim of volume %q for alloc %q was recorded, but this server stopped leading before its controller publish was made or recorded (%v); claim again to have it published",
		claim.VolumeID, claim.AllocID, err))
}

// recordPublished records on the claim that its node holds the controller
// attachment, with the attachment's publish context.
func (v *Volume) recordPublished(claim *structs.Claim, publishContext map[string]string, reply *structs.VolumeClaimResponse) error {
	cp := &structs.ClaimCheckpointRequest{
		VolumeID: claim.VolumeID, AllocID: claim.AllocID,
		State: structs.ClaimStateTaken, ExpectedState: structs.ClaimStateTaken,
		PublishContext: publishContext, ControllerPublished: true,
	}
	resp, index, err := v.srv.Apply(structs.ClaimCheckpointRequestType, cp)
	if err != nil {
		return structs.Wrap(err, fmt.Sprintf("record publish context of volume %q", claim.VolumeID))
	}
	reply.Index = index
	if r, ok := resp.(*structs.ClaimCheckpointResponse); ok && r.Claim != nil {
		reply.Claim = r.Claim
	} else {
		reply.Claim.PublishContext = publishContext
	}
	return nil
}

// claimNode is the node a claim or release acts for. A claim names it (the
// state machine checks the allocation is placed there). A release acts for
// the node the allocation is placed on, whatever node the request names:
// the state machine does not check a release's node, so a node that named
// itself could release another node's claim. No allocation, no node: only
// a token that grants volume:claim may release then.
func claimNode(srv *Deps, args *structs.VolumeClaimRequest) (string, bool) {
	if !args.Release {
		return args.NodeID, true
	}
	if a, err := srv.State().AllocByID(nil, args.AllocID); err == nil && a != nil {
		return a.NodeID, true
	}
	// An allocation this server does not have (yet): its node is unknown
	// here. The server that serves the call refuses a node secret for it.
	return "", false
}

// volumeChanged waits until the volume's row changes after index (the
// refused claim's), the deadline passes or the state is replaced, and
// reports whether it may have been freed (a change, not the deadline).
func (v *Volume) volumeChanged(volID string, index uint64, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		state := v.srv.State()
		ws := memdb.NewWatchSet()
		ws.Add(state.AbandonCh())
		vol, err := state.VolumeByID(ws, volID)
		if err != nil || vol == nil {
			return false
		}
		if vol.ModifyIndex > index {
			return true
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		werr := ws.WatchCtx(ctx)
		cancel()
		if werr != nil {
			return false
		}
	}
	return false
}

// holderDetached keeps a release's "node detached by the holding node"
// only when the caller proved it is the node the allocation is placed on
// (its own secret, with or without ACLs: a volume:claim or node:write
// token cannot know what a node unmounted), and names that node in the
// request for the state machine to check against the claim. Anyone else's
// statement is dropped, not refused: the release then takes the servers'
// own node detach, which is always safe (seed 6: nothing mounted is done).
func holderDetached(c *caller, srv *Deps, args *structs.VolumeClaimRequest) {
	node, known := claimNode(srv, args)
	if !known || !c.provedNode(node, nil) {
		args.NodeDetached, args.NodeID, args.ClaimIndex = false, "", 0
		return
	}
	args.NodeID = node
}
