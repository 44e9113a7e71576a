// Package attachment owns the controller attachment of volumes to nodes,
// the invariant at the heart of claimd: a node holds a controller
// attachment only while a claim on it needs one, a node is node-detached
// before its attachment is controller-detached (S3), an attachment one live
// claim on the node still uses is never detached (S4), and a single-writer
// volume's read-write attachment is one node's only (S1). The invariants
// S1-S8 are stated in docs/architecture.md.
//
// Both halves live here, so that one set of locks and one reading of the
// claims decides both: the claim path calls Publish for a new claim that
// needs a controller, and the release watcher calls NodeDetach and then
// Unpublish for a past claim. Both take the (volume, node) lock, so a new
// claim's publish and an old claim's unpublish on the same node never
// interleave (found by the chaos suite). The package also chooses which
// node's controller serves a controller call (seed 1: a healthy controller
// of the plugin on a ready node, the named one first) and delivers node
// calls over the node's session (seed 5), for the RPC endpoints and the
// volume lifecycle alike.
//
// It writes nothing to Raft itself: Publish records through the callback
// the claim path gives it (while the lock is held), and the watcher
// checkpoints what Unpublish did.
package attachment
