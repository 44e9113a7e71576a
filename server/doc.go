// Package server assembles a claimd server: the one TCP listener and its
// protocol-byte dispatch, Raft (raftnode) over the FSM, the RPC endpoints,
// forwarding, bootstrap-expect, and the leader-only duties switched on and
// off with leadership.
//
// The original design brief had no box for this assembly; it lives here so
// that endpoints, forward and raftnode stay small packages with one job
// each (docs/decisions.md, decision 1; the package map is in
// docs/architecture.md).
package server
