// Package bench is the load generator behind `claimd bench`: it drives a
// running cluster over the public RPC, exactly as orchestrators and client
// agents do, and reports claim throughput and latency (issue 7).
//
// One job per file:
//
//	claim.go      claim+release of distinct volumes, N concurrent callers
//	contended.go  many callers racing for a few single-node-writer volumes
//	release.go    N allocs stopped together, time until every claim is freed
//
// Every caller has its own api.Client, so its own yamux session, as
// separate processes would. Throughput counts the calls that completed
// inside the measured window (after -warmup, for -duration); latency is
// each Volume.Claim call's round trip as the caller sees it.
//
// # The simulated node
//
// A claim needs a placed allocation on a ready node with a healthy node
// plugin, and a release is finished by the servers calling that node back
// (ClientCSI.NodeDetachVolume over the node's own session). A load
// generator cannot ask operators for real agents and CSI drivers, so it
// registers its own stand-in (node.go): one node whose fingerprint has a
// healthy node plugin "bench" that needs no controller, which heartbeats
// within the TTL the servers return and answers every node detach with
// success at once. It measures the servers, not a plugin: a real agent
// adds the plugin's NodeUnpublish/NodeUnstage time to every release.
//
// # Server CPU per claim cycle
//
// A rate falls when other processes take the cores; the CPU time the
// servers spend per claim moves much less, so it is the figure to compare
// on a shared machine (issue 20). cpu.go reads each server process's
// utime+stime from /proc/PID/stat at the start and the end of the
// measured window, with the PIDs the servers report (Status.Runtime), and
// divides by the claim cycles completed in the window: a cycle is one
// (alloc, volume) pair claimed and released (in contended mode one win).
// The work a release sets off at the servers (node detach, checkpoint,
// free) lags the release call by milliseconds and falls in the same
// window. Servers on non-loopback addresses, or inside the tool's own
// process (tests), get no figure and the result says why.
//
// # Security
//
// Against a cluster with TLS and ACLs (Config.TLS, Config.Token) the tool
// behaves as the parts it stands in for: its own setup, reads and cleanup
// use the token; the simulated node registers once with the token (as an
// agent's -acl-token; a client certificate would also admit it) and then
// authenticates every call with its node secret; and the callers, which
// claim for allocs on that node as its agent would, send that secret too,
// so the servers check the node's identity on every claim. Every session,
// the node's included, is mutual TLS. Result.Security records how a run
// talked to the cluster, and the report compares secured runs with
// plaintext ones (scripts/bench.sh SECURE=both).
//
// # What it leaves behind
//
// Volume and alloc IDs start with a random per-invocation prefix. At the
// end the tool waits for every release it caused to be freed, then
// deregisters its volumes and its node (its allocs then show as lost).
// claimd keeps allocs and completed evals, so a long-lived cluster grows by
// one alloc and about one eval per volume the tool used.
package bench
