// Package client is the client agent that runs on each worker node. It
// keeps one yamux session to a server (moving to another when it fails),
// registers the node and its CSI plugin fingerprints, heartbeats, runs
// allocations (claim, stage, publish, report running), and answers the
// CSI calls that servers send down its own session.
//
// What the agent does at an allocation's stop: it unmounts the volumes it
// holds for it (the same UnmountVolume the servers' NodeDetachVolume runs)
// and reports the allocation terminal with the ones it unmounted; the
// release entry then records their node detach (decision 61). A volume it
// could not unmount is only left out: the servers own the release (seed 2
// in docs/architecture.md), their watcher calls NodeDetachVolume on this
// agent, with retries, and only then the controller. So a node plugin that
// is down when the allocation stops delays the release instead of
// stranding the mount.
//
// The agent knows the servers only through RPC: it never imports fsm,
// raftnode or endpoints.
package client
