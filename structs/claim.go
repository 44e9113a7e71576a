package structs

import (
	"fmt"
	"slices"
	"time"
)

// ClaimMode says whether an alloc reads or writes a volume.
type ClaimMode string

const (
	ClaimModeRead  ClaimMode = "read"
	ClaimModeWrite ClaimMode = "write"
)

func (m ClaimMode) Valid() bool { return m == ClaimModeRead || m == ClaimModeWrite }

// ClaimState is where a claim is on its way from taken to freed. A live
// claim (in Volume.ReadClaims or WriteClaims) is always taken; a past claim
// (in Volume.PastClaims) is being released and sits at one of the later
// states; freed means deleted, so no stored claim is ever freed.
type ClaimState string

const (
	ClaimStateTaken              ClaimState = "taken"
	ClaimStateUnpublishing       ClaimState = "unpublishing"
	ClaimStateNodeDetached       ClaimState = "node-detached"
	ClaimStateControllerDetached ClaimState = "controller-detached"
	ClaimStateFreed              ClaimState = "freed"
)

// ClaimStates lists the states in the only order a claim may move through.
var ClaimStates = []ClaimState{
	ClaimStateTaken, ClaimStateUnpublishing, ClaimStateNodeDetached,
	ClaimStateControllerDetached, ClaimStateFreed,
}

// Rank is the position of the state in ClaimStates, or -1 when the state is
// not valid. Checkpoints compare ranks: a claim only moves to a higher rank.
func (s ClaimState) Rank() int {
	for i, v := range ClaimStates {
		if s == v {
			return i
		}
	}
	return -1
}

func (s ClaimState) Valid() bool { return s.Rank() >= 0 }

// Claim is one alloc's hold on one volume from one node.
type Claim struct {
	VolumeID string `json:"volume_id"`
	AllocID  string `json:"alloc_id"`
	NodeID   string `json:"node_id"`
	// ExternalNodeID is the node plugin's own name for the node (CSI
	// NodeGetInfo), which ControllerPublish and ControllerUnpublish need.
	ExternalNodeID string         `json:"external_node_id,omitempty"`
	Mode           ClaimMode      `json:"mode"`
	AccessMode     AccessMode     `json:"access_mode"`
	AttachmentMode AttachmentMode `json:"attachment_mode"`
	State          ClaimState     `json:"state"`
	// PublishContext is what ControllerPublish returned; NodeStage and
	// NodePublish need it, and a client that restarts reads it back from
	// here instead of publishing again (ControllerPublish only for new
	// claims, S5).
	PublishContext map[string]string `json:"publish_context,omitempty"`
	// ControllerPublished is set once ControllerPublish succeeded for this
	// claim (recorded by a taken checkpoint). Until then a node must not
	// stage the volume: a re-claim answers "publish in progress".
	ControllerPublished bool `json:"controller_published,omitempty"`
	// ForcedSkip is set when an operator forced a checkpoint past a step
	// that had not succeeded (`volume detach -force`).
	ForcedSkip bool `json:"forced_skip,omitempty"`
	// NodeDetachSkipped is set when the claim reached node-detached or later
	// without a node unpublish and unstage: the one exception to S3, always
	// operator-forced, and kept on the claim so it shows in status output.
	NodeDetachSkipped bool `json:"node_detach_skipped,omitempty"`
	// NodeLost is the volume's node-lost policy when the claim was taken:
	// the node fences by it, so the release follows it too
	// (EffectiveNodeLost).
	NodeLost NodeLostPolicy `json:"node_lost,omitempty"`
	// Fenced is set when the release skipped the node detach because the
	// node was lost and its lease had run out (policy fence): the node
	// fenced itself. LeaseExpiredAt is when the leader took the lease as
	// run out.
	Fenced         bool      `json:"fenced,omitempty"`
	LeaseExpiredAt time.Time `json:"lease_expired_at,omitzero"`
	// OperatorReleased is set by an operator's `volume detach`: a claim
	// under the manual policy whose node was lost is released only then.
	OperatorReleased bool `json:"operator_released,omitempty"`
	// Steps is the claim's timeline, one entry per state it reached (taken,
	// unpublishing, ...), oldest first: what the UI and status output show
	// to say where a release stopped and since when.
	Steps []ClaimStep `json:"steps,omitempty"`

	CreateIndex uint64 `json:"create_index,omitempty"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// ClaimStep is one state a claim reached, at which Raft index, and when the
// leader appended that entry (raft.Log.AppendedAt: the same on every
// server, so replaying the log rebuilds the same steps). Time is zero for
// an entry without a time (tests that apply entries without Raft).
type ClaimStep struct {
	State ClaimState `json:"state"`
	Index uint64     `json:"index"`
	Time  time.Time  `json:"time"`
}

// WithStep returns a copy of c in state s with the step recorded. The
// copy's step list is new: the original's is shared with stored claims.
func (c *Claim) WithStep(s ClaimState, index uint64, at time.Time) *Claim {
	out := c.Copy()
	out.State = s
	out.ModifyIndex = index
	out.Steps = append(slices.Clip(c.Steps), ClaimStep{State: s, Index: index, Time: at})
	return out
}

// Copy returns a deep copy; state-store objects are never mutated in place.
func (c *Claim) Copy() *Claim {
	if c == nil {
		return nil
	}
	out := *c
	out.PublishContext = copyStringMap(c.PublishContext)
	out.Steps = slices.Clone(c.Steps)
	return &out
}

func (c *Claim) String() string {
	return fmt.Sprintf("claim(volume=%s alloc=%s node=%s mode=%s state=%s)",
		c.VolumeID, c.AllocID, c.NodeID, c.Mode, c.State)
}

// VolumeClaimRequest claims a volume for an alloc or releases the alloc's
// claim. One request type does both, so the release can never take a
// different path from the claim (seed 3). It is the Volume.Claim argument
// and one item of a ClaimBatchRequest.
type VolumeClaimRequest struct {
	VolumeID string
	AllocID  string
	NodeID   string
	// ExternalNodeID may be left empty: the server fills it in from the
	// node's fingerprint of the volume's node plugin.
	ExternalNodeID string
	Mode           ClaimMode
	// AccessMode and AttachmentMode, when given, must match the volume's;
	// they let a client refuse to mount a volume registered differently
	// from what its alloc expects.
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
	// Release turns the alloc's live claim into a past claim (unpublishing)
	// and queues a volume-claim-gc eval. Releasing a claim that does not
	// exist or is already past succeeds without change.
	Release bool
	// Wait, on a claim, lets the leader hold a refusal for max_claims up
	// to this long (at most MaxClaimWait), trying again each time the
	// volume changes, so that a waiting claim is granted when the holder's
	// release frees the volume rather than at the caller's next retry
	// (issue 41). The leader clears it before the claim is logged; an
	// older server ignores it and answers at once.
	Wait time.Duration `codec:",omitempty"`
	// NodeDetached, on a release, is the holding node's statement that it
	// has already unpublished (and, when no other claim of its own uses the
	// volume, unstaged) this claim itself, before releasing it. The release
	// entry then records node-detached, or frees the claim when its plugin
	// needs no controller detach. Only the node that holds the claim,
	// proved by its own secret, may say it: the endpoint clears it for any
	// other caller and names the proved node in NodeID, and the state
	// machine honours it only for a claim of that node, and only in a
	// ClaimBatchDetachedRequestType entry (an older server ignores the
	// field: see there, and decision 61).
	NodeDetached bool `codec:",omitempty"`
	// ClaimIndex, with NodeDetached, is the Raft index at which the claim
	// the node detached was taken (its CreateIndex, as the claim's answer
	// gave it): the statement is about that claim only, never about a
	// later claim of the same allocation on the same volume (a delayed or
	// resent release must not skip the node detach of a claim that is
	// mounted). Without it the statement is not honoured.
	ClaimIndex uint64 `codec:",omitempty"`
	WriteRequest
}

// MaxClaimWait bounds VolumeClaimRequest.Wait: well inside a forwarded
// write's 30 s, with room for the controller publish that follows.
const MaxClaimWait = 5 * time.Second

// Validate checks the fields a claim or release needs; errors name the field.
func (r *VolumeClaimRequest) Validate() error {
	if r == nil {
		return Invalid("claim", "must be given")
	}
	if err := ValidateID("volume_id", r.VolumeID); err != nil {
		return err
	}
	if err := ValidateID("alloc_id", r.AllocID); err != nil {
		return err
	}
	if r.Release {
		return nil
	}
	if r.NodeDetached || r.ClaimIndex != 0 {
		return Invalid("node_detached", "is a release's statement; a claim cannot make it")
	}
	if err := ValidateID("node_id", r.NodeID); err != nil {
		return err
	}
	if !r.Mode.Valid() {
		return Invalid("mode", fmt.Sprintf("%q is not %q or %q", r.Mode, ClaimModeRead, ClaimModeWrite))
	}
	if r.AccessMode != "" && !r.AccessMode.Valid() {
		return Invalid("access_mode", fmt.Sprintf("%q is not one of %v", r.AccessMode, AccessModes))
	}
	if r.AttachmentMode != "" && !r.AttachmentMode.Valid() {
		return Invalid("attachment_mode", fmt.Sprintf("%q is not %q or %q", r.AttachmentMode,
			AttachmentModeFilesystem, AttachmentModeBlockDevice))
	}
	if len(r.ExternalNodeID) > maxVolumeValueLen {
		return Invalid("external_node_id", fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
	}
	return nil
}

// ClaimBatchRequest is the claim batch log entry: the leader gathers the
// claims and releases that arrive within one Raft round into one entry.
// Items are applied in order, each against the state the earlier ones left.
type ClaimBatchRequest struct {
	Claims []*VolumeClaimRequest
	WriteRequest
}

// ClaimResult is the outcome of one item of a claim batch.
type ClaimResult struct {
	// Claim is the claim as stored after the item (a copy), or nil when a
	// release found nothing to release or the item was refused.
	Claim *Claim
	// New is true only when this item created the claim: the one case in
	// which the caller sends ControllerPublish (seed 3, S5).
	New bool
	// Error is the refusal, nil on success. Use Err to get an error value
	// that is nil when Error is (a nil *CodedError in an error interface is
	// not nil).
	Error *CodedError
}

// Err returns the refusal as an error, or a true nil.
func (r *ClaimResult) Err() error {
	if r == nil || r.Error == nil {
		return nil
	}
	return r.Error
}

// ClaimBatchResponse is what applying a claim batch returns: one result per
// request item, in the same order.
type ClaimBatchResponse struct {
	Results []*ClaimResult
}

// VolumeClaimResponse answers one Volume.Claim call.
type VolumeClaimResponse struct {
	Claim *Claim
	New   bool
	// Volume is the claimed volume as the claiming node needs it to stage
	// and publish: with its secrets, which no read endpoint returns.
	Volume *Volume
	WriteMeta
}

// ClaimCheckpointRequest records that a claim reached a state. Checkpoints
// only move forward: a request for an earlier state than the stored one is
// refused, and a request for the stored state changes nothing (so a retried
// checkpoint is harmless), except that a taken → taken checkpoint with a
// PublishContext records that context.
type ClaimCheckpointRequest struct {
	VolumeID string
	AllocID  string
	State    ClaimState
	// ExpectedState, when set, makes the checkpoint a compare-and-set: it is
	// refused (conflict) unless the claim is in exactly this state. A worker
	// that lost and regained leadership cannot then overwrite progress it
	// did not see.
	ExpectedState ClaimState
	// PublishContext is stored on a live claim by a taken checkpoint.
	PublishContext map[string]string
	// ControllerPublished, on a taken checkpoint, records that the
	// controller published the claim (the context may be empty).
	ControllerPublished bool
	// ForcedSkip allows moving past node-detached without having been there
	// (the operator's -force); it is recorded on the claim.
	ForcedSkip bool
	// NodeDetached says the caller has just node-detached the claim, so
	// the checkpoint may move past node-detached in the same entry (to
	// freed, when no controller detach is needed). Nothing is skipped:
	// no side effect lies between the two steps, so one entry records both.
	NodeDetached bool
	// Fenced moves an unpublishing claim of a lost node to node-detached
	// without a node detach because the node's lease ran out at
	// LeaseExpiredAt (the leader's clock, written into the log). The state
	// machine accepts it only for a claim whose policy is fence.
	Fenced         bool
	LeaseExpiredAt time.Time
	// OperatorReleased records an operator's go-ahead on a past claim
	// (it may stay in its state): see Claim.OperatorReleased.
	OperatorReleased bool
	WriteRequest
}

// CheckpointBatchRequest is the checkpoint batch log entry: the leader
// gathers the checkpoints its release workers send within one Raft round
// into one entry. Items are applied in order, each on its own: a refused
// item changes nothing and does not fail the others.
type CheckpointBatchRequest struct {
	Checkpoints []*ClaimCheckpointRequest
	WriteRequest
}

// CheckpointResult is the outcome of one item of a checkpoint batch.
type CheckpointResult struct {
	// Claim is the claim after the checkpoint (a copy), nil once freed or
	// when the item was refused.
	Claim *Claim
	// Error is the item's refusal; nil when it was applied.
	Error *CodedError
}

// Err returns the refusal as an error, or a true nil.
func (r *CheckpointResult) Err() error {
	if r == nil || r.Error == nil {
		return nil
	}
	return r.Error
}

// CheckpointBatchResponse is what applying a checkpoint batch returns: one
// result per item, in the same order.
type CheckpointBatchResponse struct {
	Results []*CheckpointResult
}

// Validate checks the request's fields; errors name the field.
func (r *ClaimCheckpointRequest) Validate() error {
	if r == nil {
		return Invalid("checkpoint", "must be given")
	}
	if err := ValidateID("volume_id", r.VolumeID); err != nil {
		return err
	}
	if err := ValidateID("alloc_id", r.AllocID); err != nil {
		return err
	}
	if !r.State.Valid() {
		return Invalid("state", fmt.Sprintf("%q is not one of %v", r.State, ClaimStates))
	}
	if r.ExpectedState != "" && !r.ExpectedState.Valid() {
		return Invalid("expected_state", fmt.Sprintf("%q is not one of %v", r.ExpectedState, ClaimStates))
	}
	if (len(r.PublishContext) > 0 || r.ControllerPublished) && r.State != ClaimStateTaken {
		return Invalid("publish_context", "only a taken checkpoint may carry one")
	}
	if r.NodeDetached && r.State.Rank() < ClaimStateNodeDetached.Rank() {
		return Invalid("node_detached", fmt.Sprintf("a checkpoint to %s cannot say the node detach is done", r.State))
	}
	return validateStringMap("publish_context", r.PublishContext)
}

// ClaimCheckpointResponse is what applying a checkpoint returns.
type ClaimCheckpointResponse struct {
	// Claim is the claim after the checkpoint (a copy), nil once freed.
	Claim *Claim
	WriteMeta
}
