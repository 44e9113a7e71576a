// Package rpc is claimd's wire: one TCP port per server whose first byte
// picks the protocol, net/rpc with the msgpack codec on top, yamux sessions
// for multiplexing, and limits on what a peer can make a server hold
// (limits.go): a frame limit so one hostile or broken request can cost a
// server at most MaxRequestBytes before its stream is closed, budgets for
// the bytes held by unfinished requests per session and per server, a
// read deadline per request, and a cap on streams per session.
//
// net/rpc is used as it is (no fork): per-connection context, where a
// handler needs it, comes from registering handlers on an rpc.Server made
// for that connection.
package rpc
