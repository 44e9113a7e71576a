package attachment

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/internal/faultpoint"
	"github.com/claimd/claimd/leaderlease"
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

// Lease is the leader's storage lease (leaderlease.Lease, decision 46): an
// operation begins before it reads the state it decides on, and each
// storage call it makes runs within its grant.
type Lease interface {
	Begin() (*leaderlease.Grant, error)
}

// holdoffWait bounds how long a call waits out a new leader's hold-off
// (12.5 s with the default lease) before it is refused as retryable: the
// caller, an operator's create or a client's claim, then simply takes a
// little longer after a leader change instead of failing. Longer leases'
// hold-offs end in a retryable refusal (the watcher retries right then).
const holdoffWait = time.Minute

// Manager is one server's attachment keeper. Its locks matter only on the
// leader, where all publishes and unpublishes run; a server keeps one
// Manager for its lifetime. Safe for concurrent use.
type Manager struct {
	state   StateSource
	nodes   NodeCaller
	lease   Lease
	logger  hclog.Logger
	locks   *Locks
	plugins pluginLocks
	pubs    publishTracker
}

// New makes a manager.
func New(state StateSource, nodes NodeCaller, lease Lease, logger hclog.Logger) *Manager {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Manager{state: state, nodes: nodes, lease: lease, logger: logger.Named("attachment"), locks: NewLocks()}
}

// Begin starts a storage operation under the leader's lease; call it
// before reading the state the operation decides on.
func (m *Manager) Begin() (*leaderlease.Grant, error) { return m.lease.Begin() }

// call delivers one storage call to a node. A call this server starts
// (routing not yet forwarded) runs only within g, the lease of the
// operation that decided it (nil: begin one now), and carries the lease's
// deadline as its budget; a call forwarded here by the leader runs within
// the budget it brought.
func (m *Manager) call(g *leaderlease.Grant, nodeID, method string, routing *structs.NodeRouting, args, reply any) error {
	var ctx context.Context
	var cancel context.CancelFunc
	if routing.Forwarded {
		ctx, cancel = routing.BudgetContext(context.Background())
	} else {
		// A test may stop the process here: after the decision, before
		// the lease is checked, as a pause or a starved goroutine would.
		faultpoint.Stop("storage-call:" + method)
		var err error
		if g == nil {
			if g, err = m.lease.Begin(); err != nil {
				return err
			}
		}
		wait, stopWait := context.WithTimeout(context.Background(), holdoffWait)
		ctx, cancel, err = g.Context(wait)
		stopWait()
		if err != nil {
			m.logger.Debug("storage call not made", "method", method, "node", nodeID, "error", err)
			return err
		}
		if d, ok := ctx.Deadline(); ok {
			m.logger.Trace("storage call", "method", method, "node", nodeID, "budget", time.Until(d))
		}
	}
	defer cancel()
	return m.nodes.Call(ctx, nodeID, method, routing, args, reply)
}
