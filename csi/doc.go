// Package csi is claimd's side of the Container Storage Interface: a gRPC
// client for plugins on unix sockets, a plugin manager that fingerprints and
// health-probes the plugins configured on a node, and a mount manager that
// stages and publishes volumes for allocations on that node.
//
// Why it is shaped this way:
//
//   - The client converts every plugin error into an *Error whose message
//     starts with a claimd error code (see structs.ErrorCode). Callers in the
//     client agent send these errors to servers over net/rpc, which flattens
//     errors to strings; the code prefix lets errors.Is work on the far side.
//
//   - "Nothing left to detach" is decided in one place (alreadyDetached): a
//     NodeUnpublishVolume or NodeUnstageVolume that fails with NotFound, "not
//     mounted" or "no mount point" is a success (seed 6 in
//     docs/architecture.md). Without this, a volume whose mount vanished
//     (node reboot, plugin restart) would block its own garbage collection
//     forever.
//
//   - An allocation's use of a volume is on disk before the volume is
//     staged, and its record goes only once the allocation's publish is
//     gone. The record is what decides whether the last user of a staged
//     volume has left, so it must exist before there is anything to
//     unstage and must survive an agent restart. The mount manager writes
//     it as a usage file, unless its caller keeps such a record itself
//     (CallerRecordsUsage: the client agent's held-claims record) and
//     hands it over at start. Usage is never rolled back on a failed
//     mount: release ends in UnmountVolume for that allocation, the
//     agent's own at the stop or the servers' detach (seed 2, decision 61).
//
//   - The plugin manager probes in rounds from one goroutine and reports the
//     whole set of fingerprints through a callback only when something
//     changed, so the agent can forward it to the servers without diffing.
//
// This package never imports fsm, raftnode or endpoints: a client agent knows
// the servers only through RPC (the package map in docs/architecture.md).
package csi
