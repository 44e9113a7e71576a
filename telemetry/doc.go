// Package telemetry sets up the process's metrics registry and serves it,
// as JSON and in the Prometheus text format.
//
// Why go-metrics through its compat package: hashicorp/raft emits its own
// metrics (raft.commitTime, raft.apply, raft.fsm.apply,
// raft.leader.lastContact, raft.replication.*) through
// github.com/hashicorp/go-metrics/compat, which, built without the
// hashicorpmetrics tag, forwards every call to the global registry of
// github.com/armon/go-metrics. claimd emits its metrics through the same
// compat package, so that Setup's one global registry holds both, and an
// operator reads Raft's commit time beside claimd's claim counters in one
// scrape. (Calling github.com/hashicorp/go-metrics directly would feed a
// second global registry that Raft never writes to.)
//
// One registry, two views: a FanoutSink feeds an InmemSink (the JSON view:
// the last finished 10 s interval, as Consul and Nomad show it) and the
// Prometheus sink (registered with a private prometheus.Registry, so that
// nothing else in the process can collide with it). Timers are in
// milliseconds, as go-metrics and Raft record them; the Prometheus sink
// shows samples as summaries, except the keys listed in histograms.go,
// which are real Prometheus histograms.
//
// Before Setup every metrics call goes to go-metrics' default blackhole
// sink, so packages emit unconditionally. Setup runs once per process: the
// registry is global (tests start many servers in one process, and the
// first Setup wins).
//
// Names: every key is prefixed with the service name ("claimd"), Raft's
// too; the Prometheus sink joins the parts with "_" (claimd.raft.commitTime
// is claimd_raft_commitTime). The keys claimd emits are listed in
// docs/metrics.md (kept beside the code that emits them).
package telemetry
