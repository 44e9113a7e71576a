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
