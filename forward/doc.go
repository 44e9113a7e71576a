// Package forward sends a server's calls to other servers: the connection
// pool (one yamux session per peer, streams reused) and forward-or-serve, the
// first line of every endpoint.
//
// Why hold and retry: during an election there is briefly no leader. A
// write that arrives then is held and retried for up to HoldTimeout instead
// of failing, so callers ride through a leader change without seeing it.
// Calls that were provably not applied are retried (no leader, or the
// request never left this server). A call whose outcome is unknown (lost
// mid-flight, or the leader lost leadership while committing it) is retried
// only if it is a write that is idempotent by construction
// (structs/resend.go); any other returns an unavailable error, because
// retrying it could apply it twice.
//
// Why one hop: a forwarded request is marked, and the receiver serves it or
// fails; it never forwards again. That bounds latency and rules out loops
// when servers disagree about who leads.
package forward
