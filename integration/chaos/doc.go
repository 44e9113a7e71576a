package chaos

// Design notes for the chaos run (Run, in runner.go). The package comment
// is in cluster.go.
//
// # Running it
//
//	go test ./integration/chaos -run TestChaos_InProcess              short schedule, ~1 min
//	go test ./integration/chaos -run TestChaos_InProcess -chaos.duration=30m
//	go test ./integration/chaos -run TestChaos_InProcess -chaos.seed=N  replay a schedule
//	go test ./integration/chaos -run CheckSavedHistory -chaos.history=DIR/history.json
//	go test ./integration/chaos -run Regression                         the bugs it found, one test each
//
// The seed fixes the fault order and durations and every caller's choices;
// it cannot fix the timing of a real cluster, so a replay reproduces the
// schedule, not the interleaving. A run prints its seed to stderr as it
// starts, with the command that replays it ("=== chaos <test>: seed N"),
// so a run that times out still leaves it.
//
// # Who claims the workload's volumes (the parking volume)
//
// A claim needs an allocation placed on the claiming node, not terminal,
// that requests the volume, and a client agent claims every pending
// allocation on its node by itself. If the workload's allocations were
// ordinary, the agent would claim them too, at times the history cannot
// record: a claim refused max_claims is retried by the agent and may land
// seconds later; a claim the workload released can be taken again by an
// agent still retrying; a claim whose controller publish failed is
// released by the server and retaken by the agent. Each is an operation
// the linearizability checker does not know about, and it would report a
// violation that is not one.
//
// Alternatives that fail: a node registered through the API with no agent
// goes down when its heartbeats stop, and the release of its claims waits
// for a session to detach through (forever, or until an operator forces
// it). Stopping an allocation before releasing it closes the window but
// makes a release and a stop the same thing, and the claim-then-stop race
// remains.
//
// So every workload allocation requests the parking volume first: a volume
// of a plugin that no node runs. The agent, which claims an allocation's
// volumes in order, is refused the parking volume (unschedulable, which it
// retries with backoff) for as long as the allocation lives, and never
// reaches the workload's volume. The workload is then the only caller
// that claims and releases its volumes; the agent still does what matters
// for the release path: it reports the allocation terminal when it is
// stopped, and it runs the server's node detach (NodeUnpublish and
// NodeUnstage of a volume it never mounted: "not mounted" counts as done).
// The audit check asserts that parking held (no agent ever staged or
// published a workload volume).
//
// Real mounts come from the mount runners, on a separate pool of one volume
// per access mode: they place ordinary allocations, which the agents claim,
// stage and publish, and stop them. Their claims are not in the history;
// the audit, release, digest and health checks cover them.
//
// # The history and the model
//
// Every workload call is one operation with invoke and return times. A
// timeout, unavailable, transport failure or leadership loss is unknown:
// the operation may take effect at any later time, so its return is
// infinite (porcupine: after everything else), except where the run knows
// better: a claim cannot land after its allocation's stop committed, and a
// release has landed by the time the allocation is seen terminal. A caller
// that got an unknown result stops the allocation and continues under a
// new one. Definite refusals (max_claims, invalid, not_found, conflict,
// unschedulable, no_leader, a request never sent) did not take effect. A
// claim whose error mentions the controller publish is unknown whatever
// its code: the server took the claim and then released it (or kept it,
// when recording the publish failed), so it is recorded as an unknown
// claim plus an unknown release over the same interval.
//
// Allocations that end lost (node marked down) or failed (the agent gave
// up) released their claims at a time nobody observed: each gets a
// synthetic release from its placement to the end of the history.
//
// The model (model.go) is the access-mode table over the live claims of
// one volume; porcupine partitions the history by volume. Before checking,
// operations that cannot change the verdict are pruned (claims with no
// answer that no read saw, releases of allocations that never held a
// claim, duplicate releases after a fence): every operation with an
// infinite return multiplies the search, and a netns run of 5,900
// operations did not check in 60 s before pruning (0.5 s after).
//
// Volumes are checked several at once (lincheck.go). One whose whole
// history does not finish in half the timeout is checked by parts
// (splitByAllocation): on multi-node volumes, where many claims coexist and
// the search still blows up under partitions, each reader's allocation is
// checked alone against every read, and the writers of a single-writer
// volume together. The split is sound but misses a read that mixes two
// moments; the run logs which volumes it was used for.
//
// # Backends
//
// The in-process backend (inproc.go) and the network-namespace backend
// (netns.go) realise the same faults differently; NewInProcess documents
// each. Two differences matter when reading results: in process, an
// isolated server still answers the workload (Jepsen's clients can talk to
// the minority side, which is how a deposed leader's stale answers would
// show), and Pause cannot freeze a server's clocks. The network-namespace
// backend runs mutual TLS with ACLs on (the workload with a token of its
// own that grants only what it calls) and checks at the end that it did;
// the in-process backend stays plaintext, so that path is covered too.
//
// # Identical state on every server (S2), after every fault
//
// S2 is checked after each fault heals, under the running workload, and
// once more at the end, idle (digests.go). Each server's Status.StateDigest
// hashes one frozen view of its state and names that view's own index
// (fsm.StateStore.Digest), not Raft's applied index, which runs ahead of
// the state machine; two digests naming one index must be equal. After a
// fault every server is sampled on its own, as fast as it answers, for up
// to 10 s: a mismatch at a shared index, or a hash that changes while its
// index does not, fails the run with the fault and every digest. The
// check is done when one index was seen on every server, or when servers
// seen at shared indexes link all of them (s1=s3 at 7, s1=s2 at 5): a
// server whose state left the others' history would differ at any later
// index. A server not linked in time is only a note (a restarted one may
// still be catching up); at the end every server must report the same
// index in one round, equal there.

// # Node loss
//
// TestChaos_NetnsNodeLoss (netns_nodeloss_test.go) is the node-loss
// nemesis of issue 26 and decision 39. w1's agent holds a 4 s lease on a
// clock running 5% slow, the most the margin allows, with a fence command
// that kills the writer it is given. Two real writer processes run on
// w1's host, each appending "<host> <seq> <unix nanos>" lines through its
// mount: one on a node_lost=fence volume, one on a node_lost=wait volume.
// The nemesis cuts w1 from every server (nftables). The checker then
// proves, from the plugins' audit logs and the writers' own records:
//
//   - w1's NodeUnpublish of the fence volume came before the controller
//     detach from w1, which came before w2's NodePublish;
//   - every w1 record is older than w1's unmount, and none follows w2's
//     first record;
//   - the fence volume ran on w2 within LeaseExpiry(lease) + 25 s of the
//     cut (the run logs the measured figure), and its released claim is
//     recorded fenced, with when the lease ran out; w1's fence.json
//     lists it;
//   - the wait volume did not move while w1 was away: its writer kept
//     running, no controller detach, the new allocation waited; after the
//     heal its release went through w1's unmount, then the controller;
//   - w1 reported its fence once back and mounted the fenced volume no
//     more.
//
// The in-process counterpart (integration/node_fence_test.go) covers the
// same path at clock rate 1, with the leader lost together with the node,
// and with a fence whose unmount fails.
//
// # Fencing (issue 39)
//
// TestChaos_NetnsFencing and TestChaos_InProcessFencing (fencing_test.go)
// are the nemeses of node A misbehaving rather than being cut off. Both
// client nodes hold a 6 s lease and run the test's fence command (a script
// whose mode file makes it kill the allocation's writer by pid, exit 1, or
// hang in `sleep 600`). In each nemesis a real writer process
// (integration/testdata/fencewriter: one file held open O_APPEND, a record
// every 50 ms, fsynced, stamped with CLOCK_BOOTTIME) runs on A against a
// single-node-writer volume; the fault hits A; the volume is then claimed
// from B, which runs a writer of its own; A comes back. The nemeses:
//
//	agent-restart        SIGTERM and start again within the lease: nothing
//	                     moves; an ordinary stop then hands the volume on
//	agent-sigstop        the agent frozen past the lease, then SIGCONT
//	                     (netns only: one process cannot freeze a part)
//	agent-kill9          kill -9 (in process: a shutdown that leaves the
//	                     mounts), started again after B took the volume
//	fence-command-fails  A cut off; the fence command exits 1
//	fence-command-hangs  A cut off; the fence command never returns, and
//	                     nothing it started may outlive its timeout
//	force-detach-return  wait policy: A's agent killed and its writer
//	                     frozen (the node is down); the operator's
//	                     `volume detach -force`; B takes the volume; A's
//	                     agent returns, and only once it reports running
//	                     does the writer thaw: the agent must have stopped
//	                     it by then
//
// The overlap checker (overlap.go) reads both writers' records: two
// writers of one single-writer volume must never both have written, by
// time (a write of A that ended after B's first began) or in the volume
// file's order (a record of A after B's first). Every nemesis ends with
// every claim released, on the servers and in both agents' held claims.
//
// What stops A's writer is the launcher (-chaos.fence-launcher): hook
// (only the agent's fence command: what a node had before issue 39, which
// no agent fault can be safe with), exec (the writer runs under `claimd
// exec`, which watches the lease file on its own; the default when the
// built claimd has it) or keeper (`claimd keeper` runs the fence command
// too; the nemeses whose fence command fails or hangs are skipped, since
// the keeper runs the same command).

// # Storage tampered with
//
// The tamper-storage nemesis (tamper.go, issue 27) is in every schedule.
// While it is on it edits the storage itself, as a storage administrator's
// own tool would: it attaches mount-pool volumes to nodes no claim asked
// for (orphans) and removes attachments live claims rely on (missing). The
// checkers then still require that no single-node volume was attached to
// two nodes by claimd, that a refusal the plugin gave was caused by an
// orphan the nemesis made (the audit replay carries its changes; an orphan
// may stand where claimd's own attachment was until the nemesis removed
// it, and holds the nemesis's single-node mode, so a multi-node volume's
// publish to another node can be refused for it), that no
// ControllerUnpublish — a reconciler's repair included — came while that
// node had the volume mounted, and that the storage itself holds nothing
// of the mount pool once every claim is freed. The mount pool is under
// node_lost=fence, so where the reconciler runs often (in process: every
// second, repairs after 2 s) claimd detaches the orphans itself; what is
// left when the fault heals, the nemesis removes unless a claim made the
// attachment its own (the run notes how many claimd repaired). The agents
// hold no lease (in process) or one longer than any fault (netns), so
// under fence the mount pool's releases still go through the node.
