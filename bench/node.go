package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// simNode is the load generator's stand-in for a client agent (see the
// package doc): it registers a node with a healthy node plugin "bench",
// heartbeats within the servers' TTL, and answers the node detaches the
// servers send down its session with success at once. It is not an agent:
// it mounts nothing, and it must never run beside real workloads.
//
// It authenticates as a client agent does (client/session.go): every call
// carries the node's secret as its AuthToken, except the first
// registration, which carries the run's token when there is one (a new
// node needs a client certificate or a node:write token, the agent's
// -acl-token); its session is TLS when the run's is.
type simNode struct {
	id      string
	secret  string
	servers []string
	logger  hclog.Logger
	timeout time.Duration
	dial    rpc.Dialer
	// registerToken is sent with Node.Register until the node is known to
	// the servers (registered), then its secret is.
	registerToken string
	registered    atomic.Bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	next int
	conn *rpc.MuxClient

	// detaches counts ClientCSI.NodeDetachVolume calls answered.
	detaches atomic.Int64
}

// startNode connects to the first reachable server, registers the node and
// starts heartbeating. Close stops it.
func startNode(ctx context.Context, id string, servers []string, cfg *Config) (*simNode, error) {
	n := &simNode{
		id: id, secret: randomHex(16), servers: servers, logger: cfg.Logger.Named("simnode"), timeout: cfg.CallTimeout,
		registerToken: cfg.Token,
	}
	if cfg.TLS != nil {
		tlsCfg := cfg.TLS
		n.dial = rpc.TLSDialer(nil, func() *tls.Config { return tlsCfg }, false)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	ttl, err := n.register(ctx)
	if err != nil {
		n.close()
		return nil, err
	}
	n.wg.Add(1)
	go n.heartbeat(ttl)
	return n, nil
}

func (n *simNode) node() *structs.Node {
	return &structs.Node{
		ID: n.id, Name: n.id, SecretID: n.secret, Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{PluginID: {
			PluginID: PluginID, Healthy: true, HealthDescription: "simulated by claimd bench",
			Provider: "claimd-bench", ProviderVersion: "1", ExternalNodeID: n.id,
		}},
	}
}

// register (re-)registers the node on the current session; the server it
// lands on binds the session, so the servers can call the node back.
func (n *simNode) register(ctx context.Context) (time.Duration, error) {
	req := &structs.NodeRegisterRequest{Node: n.node()}
	if !n.registered.Load() {
		req.AuthToken = n.registerToken
	}
	var resp structs.NodeUpdateResponse
	if err := n.call(ctx, "Node.Register", req, &resp); err != nil {
		return 0, fmt.Errorf("register node %s: %w", n.id, err)
	}
	n.registered.Store(true)
	return resp.HeartbeatTTL, nil
}

// heartbeat keeps the node ready: Node.UpdateStatus every third of the
// TTL, as client agents do, and a fresh registration after any failure
// (the session may have moved to another server).
func (n *simNode) heartbeat(ttl time.Duration) {
	defer n.wg.Done()
	registered := true
	for {
		wait := 500 * time.Millisecond
		if registered && ttl > 0 {
			wait = ttl / 3
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		var err error
		if registered {
			var resp structs.NodeUpdateResponse
			err = n.call(ctx, "Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: n.id, Status: structs.NodeStatusReady}, &resp)
			if err == nil && resp.HeartbeatTTL > 0 {
				ttl = resp.HeartbeatTTL
			}
		} else {
			var t time.Duration
			if t, err = n.register(ctx); err == nil && t > 0 {
				ttl = t
			}
		}
		cancel()
		if err != nil && n.ctx.Err() == nil {
			n.logger.Warn("heartbeat failed; registering again", "error", err)
		}
		registered = err == nil
	}
}

// session returns the live session, dialling the servers in turn when
// there is none, and serves the servers' calls on every new one.
func (n *simNode) session(ctx context.Context) (*rpc.MuxClient, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn != nil && !n.conn.IsClosed() {
		return n.conn, nil
	}
	if n.ctx.Err() != nil {
		return nil, structs.ErrShutdown
	}
	var lastErr error
	for range n.servers {
		addr := n.servers[n.next%len(n.servers)]
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := rpc.DialMux(dctx, n.dial, addr, n.logger)
		cancel()
		if err == nil {
			n.conn = conn
			n.wg.Add(1)
			go n.serve(conn)
			return conn, nil
		}
		lastErr = err
		n.next++
	}
	return nil, lastErr
}

// serve answers the calls servers open on the session, as the client
// agent's session does (client/session.go).
func (n *simNode) serve(conn *rpc.MuxClient) {
	defer n.wg.Done()
	rs := netrpc.NewServer()
	if err := rs.RegisterName("ClientCSI", &nodeCSI{n: n}); err != nil {
		panic(err) // only a programming error can fail registration
	}
	for {
		stream, err := conn.Session().AcceptStream()
		if err != nil {
			return
		}
		go rs.ServeCodec(rpc.NewServerCodec(stream, rpc.MaxRequestBytes))
	}
}

// call makes one RPC on the node's session (so that Node.Register binds
// it), authenticated with the node's secret unless args carry a token; a
// transport failure drops the session and a call that was never sent is
// tried once more on the next server.
func (n *simNode) call(ctx context.Context, method string, args, reply any) error {
	if a, ok := args.(structs.Authenticated); ok && a.Token() == "" {
		a.SetToken(n.secret)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.timeout)
		defer cancel()
	}
	var err error
	for range 2 {
		var conn *rpc.MuxClient
		if conn, err = n.session(ctx); err != nil {
			return err
		}
		err = conn.Call(ctx, method, args, reply)
		if err == nil || !errors.Is(err, rpc.ErrTransport) {
			return err
		}
		n.mu.Lock()
		if n.conn == conn {
			n.conn.Close()
			n.conn = nil
			n.next++
		}
		n.mu.Unlock()
		if !errors.Is(err, rpc.ErrNotSent) {
			return err
		}
	}
	return err
}

// reportTerminal tells the servers the node's allocs are complete, as an
// agent does once it has stopped them (batches of maxBatch).
func (n *simNode) reportTerminal(ctx context.Context, allocIDs []string) error {
	for start := 0; start < len(allocIDs); start += maxBatch {
		ids := allocIDs[start:min(start+maxBatch, len(allocIDs))]
		req := &structs.AllocClientUpdateRequest{NodeID: n.id}
		for _, id := range ids {
			req.Allocs = append(req.Allocs, &structs.AllocClientUpdate{ID: id, ClientStatus: structs.AllocClientComplete})
		}
		if err := n.call(ctx, "Node.UpdateAlloc", req, &structs.GenericResponse{}); err != nil {
			return fmt.Errorf("report allocs complete: %w", err)
		}
	}
	return nil
}

// close stops heartbeating and closes the session. The servers mark the
// node down after its TTL unless it was deregistered first.
func (n *simNode) close() {
	n.cancel()
	n.mu.Lock()
	if n.conn != nil {
		n.conn.Close()
		n.conn = nil
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// nodeCSI is the RPC receiver the servers call. Only NodeDetachVolume is
// needed: the bench plugin has no controller, so the servers never send
// controller calls here.
type nodeCSI struct{ n *simNode }

// NodeDetachVolume succeeds at once: nothing was mounted (seed 6: "not
// mounted" is a success).
func (e *nodeCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	if args.NodeID != e.n.id {
		return structs.Invalid("node_id", fmt.Sprintf("%q is not this node (%q)", args.NodeID, e.n.id))
	}
	e.n.detaches.Add(1)
	return nil
}
