package attachment

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// StateSource gives the current state store (it changes on restore).
type StateSource interface {
	State() *fsm.StateStore
}

// NodeCaller delivers a call to a client node's agent over its session,
// one hop away at most (forward.NodeRouter).
type NodeCaller interface {
	Call(ctx context.Context, nodeID, method string, routing *structs.NodeRouting, args, reply any) error
}

// Manager is one server's attachment keeper. Its locks matter only on the
// leader, where all publishes and unpublishes run; a server keeps one
// Manager for its lifetime. Safe for concurrent use.
type Manager struct {
	state   StateSource
	nodes   NodeCaller
	logger  hclog.Logger
	locks   *Locks
	plugins pluginLocks
	pubs    publishTracker
}

// New makes a manager.
func New(state StateSource, nodes NodeCaller, logger hclog.Logger) *Manager {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Manager{state: state, nodes: nodes, logger: logger.Named("attachment"), locks: NewLocks()}
}
