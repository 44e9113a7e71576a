// Package adversary attacks a secured claimd cluster the way someone with a
// stolen credential would, speaking the raw protocol (TLS with a chosen
// certificate or none, the mux protocol byte, yamux, msgpack RPC) rather
// than the api client, so that nothing on the caller's side helps.
//
// Its tests walk every registered RPC method with every kind of
// certificate (server, client, cli, none), every kind of token
// (management, read-only, node:write, another node's secret, none) and
// both kinds of entry server (the leader and a follower), and check each
// answer against the method's access rule (endpoints.AccessRules). A
// method added without a rule fails the walk, and so does a rule that is
// checked only on the leader: a refusal of a call that entered on a
// follower must be counted by that follower (decision 37).
//
// Each finding of the security review (issue 24) has its own regression
// test here: membership changes through a follower, a node:write token
// moving another node's session, plaintext membership and Raft in
// migration mode, and blocking queries that outlive their token.
package adversary
