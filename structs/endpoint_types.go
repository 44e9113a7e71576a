package structs

import "time"

// NodeUpdateResponse answers a client agent's register and heartbeat: how
// soon it must heartbeat again, and which servers it may use.
type NodeUpdateResponse struct {
	// HeartbeatTTL: a node that does not heartbeat within it is marked down.
	HeartbeatTTL time.Duration
	// Servers are the RPC addresses of the Raft voters, so a client can
	// move to another server when its own fails.
	Servers []string
	// Lease is the lease this answer renews (the node's registered lease),
	// given only by a leader that verified it still leads after it
	// received the heartbeat; 0 renews nothing.
	Lease time.Duration
	WriteMeta
}

// NodeListRequest lists nodes.
type NodeListRequest struct {
	QueryOptions
}

// PluginListRequest lists plugins.
type PluginListRequest struct {
	QueryOptions
}

// ReleaseStatus is the leader's memory of a volume's release retries. It is
// not replicated: a new leader starts over (and re-scans every eval).
type ReleaseStatus struct {
	Attempts  int
	LastError string
	NextTry   time.Time
	// LeaseExpiresAt, when set, is when a lost node's lease runs out on
	// the leader's clock: the release of its fence-policy claims waits
	// until then.
	LeaseExpiresAt time.Time `json:",omitzero"`
}

// SystemGCRequest runs the claim GC now.
type SystemGCRequest struct {
	// AllocPrefix limits the allocations removed to those whose ID starts
	// with it (a benchmark removes only its own); empty: every terminal
	// allocation without claims.
	AllocPrefix string
	WriteRequest
}

// SystemGCResponse says how many evals the claim GC created and how many
// allocations it removed.
type SystemGCResponse struct {
	EvalsCreated  int
	AllocsRemoved int
	WriteMeta
}

// ReleaseStatusRequest reads the leader's release retry state.
type ReleaseStatusRequest struct {
	QueryOptions
}

// ReleaseStatusResponse maps volume ID to its retry state (only volumes
// whose release has failed at least once).
type ReleaseStatusResponse struct {
	Volumes map[string]ReleaseStatus
}

// VolumeDetachRequest releases the claims that one node holds on a volume
// now (the operator's `claimd volume detach VOL NODE`). Force skips the
// node detach for a node that is gone for good; the skip is recorded on the
// claims.
type VolumeDetachRequest struct {
	VolumeID string
	NodeID   string
	Force    bool
	WriteRequest
}

// VolumeDetachResponse lists the allocations whose claims were released.
type VolumeDetachResponse struct {
	Released []string
	Forced   []string
	WriteMeta
}
