// Package raftnode wires hashicorp/raft for a claimd server: raft-boltdb as
// log and stable store behind a log cache, a file snapshot store, and a
// stream layer that rides the server's single RPC port (protocol byte 0x02).
//
// It knows nothing about claims: the FSM is passed in. Bootstrapping is
// separate (the server's bootstrap-expect logic decides when); this package
// only refuses to bootstrap a node that already has state.
package raftnode
