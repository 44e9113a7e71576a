package structs

import "fmt"

// AllocDesiredStatus is what the operator wants of an allocation.
type AllocDesiredStatus string

const (
	AllocDesiredRun  AllocDesiredStatus = "run"
	AllocDesiredStop AllocDesiredStatus = "stop"
)

// AllocClientStatus is what the client (or, for lost, the server) reports.
type AllocClientStatus string

const (
	AllocClientPending  AllocClientStatus = "pending"
	AllocClientRunning  AllocClientStatus = "running"
	AllocClientComplete AllocClientStatus = "complete"
	AllocClientFailed   AllocClientStatus = "failed"
	AllocClientLost     AllocClientStatus = "lost"
)

// AllocClientStatuses lists every client status.
var AllocClientStatuses = []AllocClientStatus{
	AllocClientPending, AllocClientRunning, AllocClientComplete, AllocClientFailed, AllocClientLost,
}

func (s AllocClientStatus) Valid() bool {
	for _, v := range AllocClientStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether the allocation will never run again: its claims
// are then past claims, released by the servers (seed 2).
func (s AllocClientStatus) Terminal() bool {
	return s == AllocClientComplete || s == AllocClientFailed || s == AllocClientLost
}

// AllocVolumeRequest is one volume an allocation asks for.
type AllocVolumeRequest struct {
	VolumeID string `json:"volume_id"`
	// ReadOnly allocations may only take read claims.
	ReadOnly bool `json:"read_only,omitempty"`
}

// Alloc is a workload placed on a node that may claim volumes.
type Alloc struct {
	ID                string                `json:"id"`
	NodeID            string                `json:"node_id"`
	Volumes           []*AllocVolumeRequest `json:"volumes,omitempty"`
	DesiredStatus     AllocDesiredStatus    `json:"desired_status"`
	ClientStatus      AllocClientStatus     `json:"client_status"`
	ClientDescription string                `json:"client_description,omitempty"`

	CreateIndex uint64 `json:"create_index,omitempty"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// maxAllocVolumes bounds the volumes one allocation may ask for.
const maxAllocVolumes = 64

// Validate checks an allocation as an operator places it; errors name the
// field. Statuses are set by the state machine, not the request.
func (a *Alloc) Validate() error {
	if a == nil {
		return Invalid("alloc", "must be given")
	}
	if err := ValidateID("id", a.ID); err != nil {
		return err
	}
	if err := ValidateID("node_id", a.NodeID); err != nil {
		return err
	}
	if len(a.Volumes) > maxAllocVolumes {
		return Invalid("volumes", fmt.Sprintf("has %d entries, at most %d allowed", len(a.Volumes), maxAllocVolumes))
	}
	seen := make(map[string]bool, len(a.Volumes))
	for i, v := range a.Volumes {
		field := fmt.Sprintf("volumes[%d]", i)
		if v == nil {
			return Invalid(field, "must not be null")
		}
		if err := ValidateID(field+".volume_id", v.VolumeID); err != nil {
			return err
		}
		if seen[v.VolumeID] {
			return Invalid(field+".volume_id", fmt.Sprintf("%q is requested twice", v.VolumeID))
		}
		seen[v.VolumeID] = true
	}
	return nil
}

// VolumeRequest returns the allocation's request for a volume, or nil.
func (a *Alloc) VolumeRequest(volumeID string) *AllocVolumeRequest {
	for _, v := range a.Volumes {
		if v.VolumeID == volumeID {
			return v
		}
	}
	return nil
}

// Terminal reports whether the client side of the allocation is done.
func (a *Alloc) Terminal() bool { return a.ClientStatus.Terminal() }

// Copy returns a deep copy; state-store objects are never mutated in place.
func (a *Alloc) Copy() *Alloc {
	if a == nil {
		return nil
	}
	c := *a
	if a.Volumes != nil {
		c.Volumes = make([]*AllocVolumeRequest, len(a.Volumes))
		for i, v := range a.Volumes {
			vv := *v
			c.Volumes[i] = &vv
		}
	}
	return &c
}

// AllocPlaceRequest places allocations (desired run, client pending).
// Placing an existing ID with the same node and volumes changes nothing, so
// a retried request is harmless; with anything else it is refused.
type AllocPlaceRequest struct {
	Allocs []*Alloc
	WriteRequest
}

// AllocStopRequest sets desired status stop. The allocation stays until its
// client reports it terminal; only then are its claims released.
type AllocStopRequest struct {
	AllocIDs []string
	WriteRequest
}

// AllocGCRequest removes the named allocations that are terminal and hold
// no claim, live or past; the others are left as they are.
type AllocGCRequest struct {
	AllocIDs []string
	WriteRequest
}

// AllocGCResponse names the allocations removed.
type AllocGCResponse struct {
	Removed []string
}

// AllocClientUpdate is one allocation's status as its client reports it.
type AllocClientUpdate struct {
	ID                string
	ClientStatus      AllocClientStatus
	ClientDescription string
	// DetachedVolumes, on a terminal status, are the volumes the node has
	// already node-detached (unpublished, and unstaged when it was their
	// last user here) for this allocation before reporting: their release
	// records node-detached in this entry, or frees the claim when no
	// controller detach is needed. Kept only from the node itself (its
	// secret), and honoured only in an AllocClientUpdateDetachedRequestType
	// entry; see VolumeClaimRequest.NodeDetached.
	DetachedVolumes []string `codec:",omitempty"`
}

// AllocClientUpdateResponse is the state machine's answer to a node's
// updates (the leader's, never logged): HolderDetached counts the claims
// whose release the entry recorded as node-detached by the node itself
// (decision 61; the leader's claimd.release.holder_detached).
type AllocClientUpdateResponse struct {
	HolderDetached int
}

// ValidateDetached checks DetachedVolumes (field names it in the error):
// volume IDs, each once, and only on a terminal status (the state machine
// reads the list only when the allocation ends).
func (u *AllocClientUpdate) ValidateDetached(field string) error {
	if len(u.DetachedVolumes) == 0 {
		return nil
	}
	if !u.ClientStatus.Terminal() {
		return Invalid(field, fmt.Sprintf("only a terminal status may carry it, not %q", u.ClientStatus))
	}
	// An allocation holds at most maxAllocVolumes volumes: a longer list
	// cannot be true, and is refused before the state machine reads it.
	if len(u.DetachedVolumes) > maxAllocVolumes {
		return Invalid(field, fmt.Sprintf("has %d entries, at most %d allowed", len(u.DetachedVolumes), maxAllocVolumes))
	}
	seen := make(map[string]bool, len(u.DetachedVolumes))
	for i, id := range u.DetachedVolumes {
		if err := ValidateID(fmt.Sprintf("%s[%d]", field, i), id); err != nil {
			return err
		}
		if seen[id] {
			return Invalid(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q is given twice", id))
		}
		seen[id] = true
	}
	return nil
}

// AllocClientUpdateRequest carries a node's allocation updates. An update to
// an allocation that is already terminal is ignored: the first terminal
// status stands, so a late report cannot revive an allocation whose claims
// are being released.
type AllocClientUpdateRequest struct {
	// NodeID, when set, must own every allocation updated: a node reports
	// only its own.
	NodeID string
	Allocs []*AllocClientUpdate
	WriteRequest
}

// AllocSpecificRequest reads one allocation.
type AllocSpecificRequest struct {
	ID string
	QueryOptions
}

// AllocListRequest lists allocations, optionally of one node.
type AllocListRequest struct {
	NodeID string
	QueryOptions
}

// AllocResponse carries one allocation (nil when not found).
type AllocResponse struct {
	Alloc *Alloc
	QueryMeta
}

// AllocListResponse carries allocations sorted by ID.
type AllocListResponse struct {
	Allocs []*Alloc
	QueryMeta
}
