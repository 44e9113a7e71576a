package forward

import (
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/rpc"
)

// NodeConn is a client agent's session to this server. Servers call the
// client by opening streams on it: clients may sit behind NAT, so servers
// never dial them.
type NodeConn struct {
	NodeID      string
	Established time.Time
	Client      *rpc.MuxClient
}

// NodeConns records which session belongs to which node. A node that
// reconnects replaces its entry; a closed session is dropped. Safe for
// concurrent use.
type NodeConns struct {
	mu    sync.Mutex
	conns map[string]*NodeConn
}

// NewNodeConns makes an empty registry.
func NewNodeConns() *NodeConns { return &NodeConns{conns: map[string]*NodeConn{}} }

// Add binds nodeID to sess (idempotent for the same session).
func (r *NodeConns) Add(nodeID string, sess *yamux.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.conns[nodeID]; ok && c.Client.Session() == sess {
		return
	}
	r.conns[nodeID] = &NodeConn{NodeID: nodeID, Established: time.Now(), Client: rpc.WrapSession(sess)}
}

// RemoveSession drops every node bound to sess (called when it closes).
func (r *NodeConns) RemoveSession(sess *yamux.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, c := range r.conns {
		if c.Client.Session() == sess {
			delete(r.conns, id)
		}
	}
}

// Get returns the node's live session, if this server holds one.
func (r *NodeConns) Get(nodeID string) (*NodeConn, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.conns[nodeID]
	if ok && c.Client.IsClosed() {
		delete(r.conns, nodeID)
		return nil, false
	}
	return c, ok
}

// Len is how many client sessions this server holds (for the
// client_sessions gauge).
func (r *NodeConns) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}
