package watcher

import (
	"time"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/structs"
)

// StateSource gives the current state store (it changes on restore).
type StateSource interface {
	State() *fsm.StateStore
}

// Applier commits log entries (the server).
type Applier interface {
	// Apply commits one entry.
	Apply(t structs.MessageType, msg any) (any, uint64, error)
	// Checkpoint records one claim checkpoint; the server gathers the
	// checkpoints that workers send together into one entry. A refusal
	// is the error, as from Apply.
	Checkpoint(*structs.ClaimCheckpointRequest) (*structs.ClaimCheckpointResponse, uint64, error)
}

// Attachments is the release's side of the attachment invariant
// (package attachment): a claim's node detach, then its controller detach,
// which decides on fresh state under the lock the claim path's publish
// takes too.
type Attachments interface {
	// Begin starts a release pass under the leader's storage lease,
	// before the pass reads the state (decision 46); its calls are made
	// within the grant.
	Begin() (*leaderlease.Grant, error)
	// NodeDetach runs NodeUnpublish/NodeUnstage on a claim's node,
	// wherever its session is.
	NodeDetach(*leaderlease.Grant, *structs.ClientCSINodeDetachRequest, *structs.ClientCSINodeDetachResponse) error
	// Unpublish controller-detaches a node-detached claim's volume from
	// its node unless another claim there still needs the attachment;
	// attachment.ErrVolumeDeregistered when the volume is gone.
	Unpublish(g *leaderlease.Grant, vol *structs.Volume, c *structs.Claim) error
}

// LeaseClock says when a lost node's lease has run out on this leader's
// clock (Heartbeats).
type LeaseClock interface {
	LeaseExpiry(nodeID string, lease time.Duration) (at time.Time, expired bool)
}
