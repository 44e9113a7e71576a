// Package client is the client agent that runs on each worker node. It
// keeps one yamux session to a server (moving to another when it fails),
// registers the node and its CSI plugin fingerprints, heartbeats, runs
// allocations (claim, stage, publish, report running), and answers the
// CSI calls that servers send down its own session.
//
// Why the agent never unmounts on stop: a stopping allocation is reported
// terminal and nothing more. The servers own the release (seed 2 in
// docs/architecture.md): their watcher calls NodeDetachVolume on this agent,
// and only then the controller. So a node plugin that is down when the
// allocation stops delays the release instead of stranding the mount.
//
// The agent knows the servers only through RPC: it never imports fsm,
// raftnode or endpoints.
package client
