package forward

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/structs"
)

// NodeCallTimeout bounds one server→client call. CSI publish and unpublish
// may take tens of seconds on real storage; the plugin client has its own
// per-call timeouts below this.
const NodeCallTimeout = 2 * time.Minute

// NodeRouter delivers calls to client nodes: over the node's own session
// when this server holds it, otherwise one hop to the server that holds the
// node's newest session (seed 5).
type NodeRouter struct {
	conns *NodeConns
	pool  *Pool
	// peers returns the other servers' RPC addresses.
	peers func() []string
	// serverToken is the cluster's server token ("" when ACLs are off),
	// the credential of a hop to another server when TLS is off.
	serverToken func() string
}

// NewNodeRouter makes a router.
func NewNodeRouter(conns *NodeConns, pool *Pool, peers func() []string, serverToken func() string) *NodeRouter {
	if serverToken == nil {
		serverToken = func() string { return "" }
	}
	return &NodeRouter{conns: conns, pool: pool, peers: peers, serverToken: serverToken}
}

// Bind makes sess the node's session (endpoints.NodeSessions): calls for
// the node go over it from now on.
func (r *NodeRouter) Bind(nodeID string, sess *yamux.Session) { r.conns.Add(nodeID, sess) }

// Conns is the node-connection registry.
func (r *NodeRouter) Conns() *NodeConns { return r.conns }

// HasConn answers Status.HasNodeConn.
func (r *NodeRouter) HasConn(nodeID string) structs.NodeConnResponse {
	if c, ok := r.conns.Get(nodeID); ok {
		return structs.NodeConnResponse{Connected: true, Established: c.Established.UnixNano()}
	}
	return structs.NodeConnResponse{}
}

// Call invokes method on the client agent of nodeID, whose handler has the
// same name. routing marks a call that already took its one hop; such a
// call is delivered only over a local session.
func (r *NodeRouter) Call(ctx context.Context, nodeID, method string, routing *structs.NodeRouting, args, reply any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, NodeCallTimeout)
		defer cancel()
	}
	// A storage call's budget is what is left of the leader's lease
	// (decision 46): once it is spent the call must not start, here or
	// at the next hop.
	if err := ctx.Err(); err != nil {
		return structs.NewError(structs.CodeTimeout, fmt.Sprintf("%s for node %q not sent: its time ran out (%v)", method, nodeID, err))
	}
	if c, ok := r.conns.Get(nodeID); ok {
		// The server token is for servers: it never travels to a client.
		routing.AuthToken = ""
		routing.SetBudget(ctx)
		return c.Client.Call(ctx, method, args, reply)
	}
	if routing.Forwarded {
		return structs.NewError(structs.CodeUnavailable, fmt.Sprintf("node %q is not connected to this server", nodeID))
	}
	addr, err := r.findServer(ctx, nodeID)
	if err != nil {
		return err
	}
	routing.Forwarded, routing.AuthToken = true, r.serverToken()
	defer func() { routing.Forwarded, routing.AuthToken = false, "" }()
	routing.SetBudget(ctx)
	return r.pool.RPC(ctx, addr, method, args, reply)
}

// sessionGrace is how long findServer waits for the other servers once
// one has said it holds the node's session: a newer session elsewhere
// exists only in the moment an agent moves, and a server that is stopped
// or cut off must not cost every node call its whole timeout (a storage
// call's budget is a few seconds: decision 46).
const sessionGrace = 250 * time.Millisecond

// findServer asks every other server whether it holds the node's session
// and returns the one with the newest, waiting for every answer only
// until one server has said yes and sessionGrace has passed.
func (r *NodeRouter) findServer(ctx context.Context, nodeID string) (string, error) {
	type answer struct {
		addr string
		resp structs.NodeConnResponse
	}
	peers := r.peers()
	answers := make(chan answer, len(peers))
	for _, addr := range peers {
		go func(addr string) {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var resp structs.NodeConnResponse
			if err := r.pool.RPC(actx, addr, "Status.HasNodeConn", &structs.NodeConnRequest{NodeID: nodeID, AuthToken: r.serverToken()}, &resp); err != nil {
				resp = structs.NodeConnResponse{}
			}
			answers <- answer{addr, resp}
		}(addr)
	}
	best := answer{}
	var grace <-chan time.Time
	for range peers {
		select {
		case a := <-answers:
			if a.resp.Connected && a.resp.Established > best.resp.Established {
				best = a
				if grace == nil {
					grace = time.After(sessionGrace)
				}
			}
			continue
		case <-grace:
		case <-ctx.Done():
		}
		break
	}
	if best.addr == "" {
		return "", structs.NewError(structs.CodeUnavailable, fmt.Sprintf("node %q is not connected to any server", nodeID))
	}
	return best.addr, nil
}
