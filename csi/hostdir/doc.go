// Package hostdir is claimd's built-in CSI plugin: a real CSI gRPC server in
// which a volume is a directory under a root directory. It exists so that
// every claimd test, and `claimd agent -dev`, can drive real CSI calls over a
// real unix socket without storage hardware, and so that tests can observe
// and disturb those calls (the audit log and fault injection).
//
// Layout under -root, shared by every hostdir process pointed at it (the
// root plays the part of a storage system all simulated nodes can reach):
//
//	volumes/<id>/          the volume's data (volumes/.new-<id>/ while
//	                       CreateVolume builds it, renamed when whole)
//	meta/<id>.json         name, quota, parameters, content source and
//	                       accessible topology, for volumes made by
//	                       CreateVolume (or grown by ControllerExpandVolume)
//	snapshots/<id>/        a snapshot's copy of its source volume
//	snapmeta/<id>.json     a snapshot's name, source and size; written last
//	expansions/<node>/<id>.json  the size NodeExpandVolume last recorded
//	attachments/<id>.json  which nodes the controller attached the volume to
//	attachments/.lock      flock serialising attachment changes across processes
//	nodes/<node-id>        node plugins that have started, with their
//	                       -max-volumes and -topology (ControllerPublish to
//	                       any other node ID is NotFound, beyond the limit
//	                       ResourceExhausted, outside the volume's topology
//	                       FailedPrecondition)
//
// A volume's quota is recorded, not enforced on writes: a directory has no
// size. GetCapacity and CreateVolume allocate quotas from -capacity when it
// is given, and otherwise bound each quota by the root's free space.
//
// A volume exists when its directory exists: CreateVolume makes one, and an
// operator may make one by hand (mkdir <root>/volumes/<id>) for a volume
// registered in claimd with that external ID.
//
// Attachments are persisted and changed under an flock, so the rule that a
// single-node volume is attached to one node at a time holds across plugin
// restarts and across several controller processes sharing a root. That
// rule is the property claimd exists to protect; the plugin enforcing it
// independently lets tests catch a claimd bug instead of trusting it.
//
// Staging and publishing bind-mount when the process is root and fall back
// to symlinks otherwise (or when the mount fails, as in an unprivileged
// container). Unpublish and unstage of something not there succeed: they
// must be idempotent by the CSI spec.
//
// Identity advertises the controller service in every mode, as drivers
// split into node and controller processes commonly do: the plugin has a
// controller even when this process does not serve it.
//
// Every call is written to the audit log, one JSON line, when it finishes.
// Faults come from flags and from a control file read on every call; see
// Control.
package hostdir
