package structs

import (
	"context"
	"time"
)

// CSIControllerQuery is embedded in every controller call the servers make
// (seed 5; the seed rules are listed in docs/architecture.md). When
// ControllerNodeID is empty the server picks a node that runs a healthy
// controller of PluginID; when it is set the server checks that
// the node does (seed 1). Callers never need to know how targets are chosen.
type CSIControllerQuery struct {
	ControllerNodeID string
	PluginID         string
}

// NodeRouting is embedded in every call meant for a client node. A server
// that does not hold the node's session forwards the call once to the
// server that does; Forwarded stops a second hop.
type NodeRouting struct {
	Forwarded bool
	// AuthToken is the server token when ACLs are on without TLS (with
	// TLS, the server certificate is the credential).
	AuthToken string
	// Budget is how long the call may still run, counted by whoever
	// receives it from when it arrived: what is left of the leader's
	// storage lease when the call was sent (decision 46). Every hop
	// passes on what is left of it; a relay or an agent does not start
	// the call once it is spent. A duration, not a time: the machines'
	// clocks are not compared. 0: the sender set none (an older server).
	Budget time.Duration
}

// BudgetContext is the context a receiver runs the call in: Budget from
// now, or parent's own limits when the sender set none.
func (r *NodeRouting) BudgetContext(parent context.Context) (context.Context, context.CancelFunc) {
	if r.Budget <= 0 {
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, r.Budget)
}

// SetBudget records what is left of ctx's deadline as the call's budget.
func (r *NodeRouting) SetBudget(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		r.Budget = max(time.Until(d), time.Nanosecond)
	}
}

func (r *NodeRouting) Token() string     { return r.AuthToken }
func (r *NodeRouting) SetToken(t string) { r.AuthToken = t }

// ClientCSIControllerAttachRequest asks a controller plugin to publish a
// volume to a node (ControllerPublishVolume). Sent only for a new claim
// (seed 3).
type ClientCSIControllerAttachRequest struct {
	CSIControllerQuery
	VolumeID       string // claimd's volume ID, for logs
	ExternalID     string // the plugin's volume ID
	ExternalNodeID string // the plugin's node ID of the claiming node
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
	ReadOnly       bool
	MountOptions   *MountOptions
	Secrets        Secrets
	VolumeContext  map[string]string
	NodeRouting
}

// ClientCSIControllerAttachResponse carries the plugin's publish context,
// which the node needs to stage and publish.
type ClientCSIControllerAttachResponse struct {
	PublishContext map[string]string
	// ControllerNodeID is the node whose controller answered.
	ControllerNodeID string
}

// ClientCSIControllerDetachRequest asks a controller plugin to unpublish a
// volume from a node (ControllerUnpublishVolume). The servers send it only
// after the node detached (S3) and when no other live claim on that node
// uses the volume (S4).
type ClientCSIControllerDetachRequest struct {
	CSIControllerQuery
	VolumeID       string
	ExternalID     string
	ExternalNodeID string
	Secrets        Secrets
	NodeRouting
}

// ClientCSIControllerDetachResponse is empty: success is the answer.
type ClientCSIControllerDetachResponse struct {
	ControllerNodeID string
}

// ClientCSINodeDetachRequest asks a client node to unpublish an
// allocation's volume and, when no other allocation on the node uses it, to
// unstage it. "Not mounted" counts as done (seed 6).
type ClientCSINodeDetachRequest struct {
	NodeID         string
	PluginID       string
	VolumeID       string
	ExternalID     string
	AllocID        string
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
	ReadOnly       bool
	NodeRouting
}

// ClientCSINodeDetachResponse is empty: success is the answer.
type ClientCSINodeDetachResponse struct{}

// NodeConnRequest asks a server whether it holds a node's session.
type NodeConnRequest struct {
	NodeID    string
	AuthToken string
}

func (r *NodeConnRequest) Token() string     { return r.AuthToken }
func (r *NodeConnRequest) SetToken(t string) { r.AuthToken = t }

// NodeConnResponse: Connected with the session's start, so the caller can
// pick the newest when a node reconnected to another server.
type NodeConnResponse struct {
	Connected   bool
	Established int64 // unix nanoseconds
}
