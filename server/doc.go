// Package server assembles a claimd server: the one TCP listener and its
// protocol-byte dispatch, Raft (raftnode) over the FSM, the RPC endpoints,
// forwarding, bootstrap-expect, and the leader-only duties switched on and
// off with leadership.
//
// DESIGN.md has no box for this assembly; it lives here so that endpoints,
// forward and raftnode stay small packages with one job each (see
// docs/decisions.md).
package server
