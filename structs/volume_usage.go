package structs

// Volume usage (issue 27): what the node plugins holding a volume report
// of it now (NodeGetVolumeStats), asked live through the nodes' sessions
// and recorded nowhere: usage changes all the time, and a Raft entry per
// change would cost more than it tells.

// VolumeUsageRequest asks for a volume's usage on every node that holds
// a live claim on it.
type VolumeUsageRequest struct {
	VolumeID string
	QueryOptions
}

// VolumeUsage is one node's view of a volume it has mounted.
type VolumeUsage struct {
	NodeID         string `json:"node_id"`
	AllocID        string `json:"alloc_id"`
	BytesTotal     int64  `json:"bytes_total"`
	BytesUsed      int64  `json:"bytes_used"`
	BytesAvailable int64  `json:"bytes_available"`
	InodesTotal    int64  `json:"inodes_total,omitempty"`
	InodesUsed     int64  `json:"inodes_used,omitempty"`
	// Error says why this node could not tell (its plugin lacks
	// GET_VOLUME_STATS, the node is away, ...).
	Error string `json:"error,omitempty"`
}

// VolumeUsageResponse carries one entry per live claim.
type VolumeUsageResponse struct {
	Usage []*VolumeUsage
	QueryMeta
}

// ClientCSINodeStatsRequest asks a node for a volume's usage where it
// mounted it for an allocation.
type ClientCSINodeStatsRequest struct {
	NodeID     string
	PluginID   string
	VolumeID   string
	ExternalID string
	AllocID    string
	NodeRouting
}

// ClientCSINodeStatsResponse is the node plugin's answer.
type ClientCSINodeStatsResponse struct {
	Usage VolumeUsage
}

// ClientCSINodeHeldRequest asks a node which allocations have a volume
// mounted there (what its agent holds), before a server detaches an
// attachment of that volume that no claim in the record explains.
type ClientCSINodeHeldRequest struct {
	NodeID   string
	VolumeID string
	NodeRouting
}

// ClientCSINodeHeldResponse lists the allocations that hold it (none: the
// node does not use the volume).
type ClientCSINodeHeldResponse struct {
	Allocs []string
}
