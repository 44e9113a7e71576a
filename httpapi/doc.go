// Package httpapi is the agent's HTTP API (-http-addr, default
// 127.0.0.1:4646): JSON over HTTP for operators, scripts and load
// balancers. docs/http-api.md lists every route with a curl example.
//
// # One set of rules
//
// Every route except the agent's own health and self calls an existing RPC
// endpoint through the Go api client (package api), connected to this
// agent's server (a server agent) or to its servers (a client agent). The
// HTTP caller's X-Claimd-Token goes into the request's AuthToken unchanged,
// so the RPC layer decides everything it decides for the CLI: forwarding to
// the leader, stale reads, blocking queries, validation, and the ACL check
// by the server that serves the call. No rule lives here twice; this
// package only translates (query string and body in, JSON and a status
// code out).
//
// # TLS
//
// With TLS on, the listener is HTTPS with the agent's certificate and, like
// the RPC port, requires a client certificate that chains to the cluster's
// CA (tlsutil.Configurator.IncomingConfig). The handlers' RPC session uses
// the agent's own certificate (OutgoingConfig). That certificate proves to
// the servers that the caller is a server or client agent, which some
// server-to-server methods accept as their credential (ClientCSI.*,
// Status.Hello, Operator.RaftJoin, a combined agent's Node.Register). No
// route here calls any of them: every route's method is authorized by the
// caller's token alone (endpoints.AccessRules: capability, management,
// any-token, bootstrap or open), so the agent's certificate never lends an
// HTTP caller its rights. A new route must keep it so.
//
// # Health and self
//
// GET /v1/agent/health and GET /v1/agent/self answer from this agent's own
// memory, without a token (load balancers call them), and show nothing
// secret: no token, no key, no node secret.
package httpapi
