package watcher

import (
	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// StateSource gives the current state store (it changes on restore).
type StateSource interface {
	State() *fsm.StateStore
}

// Applier commits log entries (the server).
type Applier interface {
	// Apply commits one entry.
	Apply(t structs.MessageType, msg any) (any, uint64, error)
	// Checkpoint records one claim checkpoint; the server gathers the
	// checkpoints that workers send together into one entry. A refusal
	// is the error, as from Apply.
	Checkpoint(*structs.ClaimCheckpointRequest) (*structs.ClaimCheckpointResponse, uint64, error)
}

// NodeDetacher runs NodeUnpublish/NodeUnstage on a claim's node, wherever
// its session is (the server's ClientCSI shim).
type NodeDetacher interface {
	NodeDetachVolume(*structs.ClientCSINodeDetachRequest, *structs.ClientCSINodeDetachResponse) error
}

// ControllerDetacher runs ControllerUnpublish on a healthy controller of the
// plugin (the server's ClientCSI shim picks it).
type ControllerDetacher interface {
	ControllerDetachVolume(*structs.ClientCSIControllerDetachRequest, *structs.ClientCSIControllerDetachResponse) error
}

// CSI is both detachers.
type CSI interface {
	NodeDetacher
	ControllerDetacher
}
