// Package fsm is claimd's replicated state machine: the go-memdb schema, the
// handlers that apply Raft log entries to it, snapshots and restore, and the
// watch channels behind blocking queries. It decides who may hold a volume,
// so it is built to be correct by construction and checkable far from any
// network. This comment says why it looks the way it does.
//
// # A thin wrapper over plain functions
//
// FSM.Apply only unwraps the raft.Log and calls apply(index, data); every
// rule lives in a handler of the form func(tx *txn, req *Request) (any,
// error). Tests, the rapid property test, the fuzz target and the benchmarks
// drive those functions with a Raft index they choose, with no Raft, no disk
// and no goroutines. The package does no I/O, reads no clock and starts
// nothing: the same log must give the same state on every server (S2 in
// docs/architecture.md), and a wall clock or a random number is the easiest
// way to break that. Where the state machine must invent something, such as
// the ID of a volume-claim-gc eval, it derives it from the Raft index
// (structs.DeriveEvalID). Where it iterates a map and the order could reach
// the state or a result (plugins of a node, volumes of an alloc, holders
// named in an error), it sorts first.
//
// # One entry, one transaction
//
// An entry is a type byte and a msgpack body (structs.Encode). The dispatch
// table maps the type to a handler, registered from the init function of the
// file that holds it (Consul's registerCommand): adding an entry type adds a
// file. The dispatcher decodes the body, opens one memdb write transaction
// and commits it only when the handler accepts. So a refused request changes
// nothing, even when it is refused halfway through a batch of volumes, and
// readers never see half an entry. Handlers copy every object they change
// and stamp it with the entry's index (CreateIndex when new, ModifyIndex
// always); stored objects are shared with readers and are never mutated.
// The index table records the last index that wrote each table, so a
// blocking query over a table notices deletes too.
//
// # Refusals are values, corruption is fatal
//
// A request the rules refuse (not found, max claims, invalid, conflict) is
// returned from Apply as a *structs.CodedError. It is an ordinary outcome:
// every server computes the same refusal at the same index, and the leader
// hands it back to the caller, code intact across RPC hops. Panicking there
// would turn one bad request into a cluster outage. The claim batch goes a
// step further: its items are many callers' requests sharing a Raft round,
// so each gets its own result (structs.ClaimBatchResponse) and one refused
// claim never fails the others; items are checked in order against the
// state the earlier ones left.
//
// An entry that cannot be decoded, or has an unknown type without the
// structs.IgnoreUnknownTypeFlag bit, is different: applying it wrongly or
// skipping it would make this server's state diverge silently from the
// others'. Apply panics with a *CorruptEntryError, deterministically, and
// the operator has to look. That is the only deliberate panic.
//
// # Claims are inside volumes
//
// A volume's claims (read, write, past; keyed by alloc ID) are fields of the
// volume row, not a table of their own: admission needs all of them at
// once, and they must change in the same transaction as the volume's
// current modes. A multi-index (claim_node) finds a node's claims without a
// scan. Claim changes copy the volume's claim maps but share the claims
// they do not touch (cowVolume), so a busy multi-writer volume is not deep
// copied on every claim.
//
// # Snapshots
//
// Snapshot takes a memdb read transaction, which is an immutable view:
// Persist streams it on raft's goroutine while Apply goes on. The stream is
// versioned, one msgpack record per object, written with sorted map keys so
// that two servers with the same state write the same bytes (which is how
// the tests check S2). Restore builds a complete new store aside, swaps it
// in atomically and closes the old store's AbandonCh, which every read adds
// to the caller's WatchSet, so blocking queries wake up and re-read.
package fsm
