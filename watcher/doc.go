// Package watcher holds the leader-only workers: the volume-claim GC that
// releases past claims (node detach, then controller detach, then free),
// the periodic claim GC that makes sure no past claim is left without an
// eval, and the node heartbeat timers.
//
// Why server-driven: an allocation that stops while its node plugin is
// missing cannot unmount by itself, and a controller detach before the node
// detach can corrupt data (CSI requires NodeUnpublish and NodeUnstage
// before ControllerUnpublish). So the leader owns the release and drives it
// until it succeeds: every side effect is recorded by a Raft checkpoint
// before the next one starts, checkpoints only move forward and are
// applied as a compare-and-set on the claim's state, so a new leader
// resumes exactly where the old one stopped and a stale leader's write is
// refused. Steps with no side effect between them share one checkpoint
// (node detach → freed when there is no controller; controller detach →
// freed), and concurrent workers' checkpoints share entries.
//
// Why retry state lives in memory: attempts, last error and next try are
// facts about this leader's work, not about the cluster; putting them in
// the log would make every failed attempt a replicated write. A new leader
// starts fresh and re-scans every pending eval.
//
// Concurrency: work for one volume is serialised (one worker at a time per
// volume); different volumes run in parallel on a bounded pool; destructive
// controller calls are serialised per plugin. Failures back off with capped
// exponential delays and full jitter, so a missing plugin never hot-loops
// and never blocks other volumes.
package watcher
