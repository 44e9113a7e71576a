package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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
// -acl-token); its session is TLS when the run's is. Several nodes may
// share one session (scale mode): the servers bind every node a session
// registers to that session, and each call names its node by its secret.
type simNode struct {
	id     string
	secret string
	sess   *nodeSession
	logger hclog.Logger
	// registerToken is sent with Node.Register until the node is known to
	// the servers (registered), then its secret is.
	registerToken string
	registered    atomic.Bool
	// beat, when set, is told of every heartbeat: when it was sent and
	// whether the servers accepted it (scale mode's takeover figures).
	beat func(n *simNode, sent time.Time, ok bool)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// quit ends the heartbeat loop at its next wait, letting a heartbeat
	// in flight finish (stop).
	quit     chan struct{}
	quitOnce sync.Once

	// detaches counts ClientCSI.NodeDetachVolume calls answered.
	detaches atomic.Int64
	// ownSession: the node was started alone (startNode) and its close
	// closes the session too.
	ownSession bool
}

// startNode connects to the first reachable server, registers the node on
// a session of its own and starts heartbeating. Close stops both.
func startNode(ctx context.Context, id string, servers []string, cfg *Config) (*simNode, error) {
	sess := newNodeSession(servers, cfg)
	n, err := sess.startNode(ctx, id, nil)
	if err != nil {
		sess.close()
		return nil, err
	}
	n.ownSession = true
	return n, nil
}

// startNode registers a node on this session and starts its heartbeat;
// beat (may be nil) observes the heartbeats.
func (s *nodeSession) startNode(ctx context.Context, id string, beat func(*simNode, time.Time, bool)) (*simNode, error) {
	n := &simNode{
		id: id, secret: randomHex(16), sess: s, logger: s.logger, registerToken: s.registerToken, beat: beat,
	}
	n.ctx, n.cancel = context.WithCancel(s.ctx)
	n.quit = make(chan struct{})
	s.mu.Lock()
	s.nodes[id] = n
	s.mu.Unlock()
	ttl, err := n.register(ctx)
	if err != nil {
		n.stop()
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
	req.AuthToken = n.secret
	if !n.registered.Load() && n.registerToken != "" {
		req.AuthToken = n.registerToken
	}
	var resp structs.NodeUpdateResponse
	if err := n.sess.call(ctx, "Node.Register", req, &resp); err != nil {
		return 0, fmt.Errorf("register node %s: %w", n.id, err)
	}
	n.registered.Store(true)
	return resp.HeartbeatTTL, nil
}

// heartbeat keeps the node ready: Node.UpdateStatus every third of the
// TTL, as client agents do, and a fresh registration after any failure
// (the session may have moved to another server), retried every half
// second. The first heartbeat comes after a random part of the first
// interval, so that many nodes started together spread their beats.
func (n *simNode) heartbeat(ttl time.Duration) {
	defer n.wg.Done()
	registered := true
	wait := time.Duration(0)
	if ttl > 0 {
		wait = time.Duration(mrand.Int64N(int64(ttl / 3)))
	}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.quit:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		sent := time.Now()
		var err error
		if registered {
			var resp structs.NodeUpdateResponse
			req := &structs.NodeUpdateStatusRequest{NodeID: n.id, Status: structs.NodeStatusReady}
			req.AuthToken = n.secret
			err = n.sess.call(ctx, "Node.UpdateStatus", req, &resp)
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
		if n.beat != nil && n.ctx.Err() == nil {
			n.beat(n, sent, err == nil)
		}
		if err != nil && n.ctx.Err() == nil {
			n.logger.Debug("heartbeat failed; registering again", "node", n.id, "error", err)
		}
		registered = err == nil
		wait = 500 * time.Millisecond
		if registered && ttl > 0 {
			wait = ttl / 3
		}
	}
}

// nodeSession is one yamux session to a server that one or more
// simulated nodes share: it dials the servers in turn, serves the calls
// servers open on it (routed to the node they name), and makes the nodes'
// calls.
type nodeSession struct {
	servers       []string
	logger        hclog.Logger
	timeout       time.Duration
	dial          rpc.Dialer
	registerToken string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	next  int
	conn  *rpc.MuxClient
	nodes map[string]*simNode
}

// newNodeSession makes a session that dials servers (starting with the
// first) when a call needs it.
func newNodeSession(servers []string, cfg *Config) *nodeSession {
	s := &nodeSession{
		servers: servers, logger: cfg.Logger.Named("simnode"), timeout: cfg.CallTimeout,
		registerToken: cfg.Token, nodes: map[string]*simNode{},
	}
	if cfg.TLS != nil {
		tlsCfg := cfg.TLS
		s.dial = rpc.TLSDialer(nil, func() *tls.Config { return tlsCfg }, false)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// session returns the live session, dialling the servers in turn when
// there is none, and serves the servers' calls on every new one.
func (s *nodeSession) session(ctx context.Context) (*rpc.MuxClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	if s.ctx.Err() != nil {
		return nil, structs.ErrShutdown
	}
	var lastErr error
	for range s.servers {
		addr := s.servers[s.next%len(s.servers)]
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := rpc.DialMux(dctx, s.dial, addr, s.logger)
		cancel()
		if err == nil {
			s.conn = conn
			s.wg.Add(1)
			go s.serve(conn)
			return conn, nil
		}
		lastErr = err
		s.next++
	}
	return nil, lastErr
}

// serve answers the calls servers open on the session, as the client
// agent's session does (client/session.go).
func (s *nodeSession) serve(conn *rpc.MuxClient) {
	defer s.wg.Done()
	rs := netrpc.NewServer()
	if err := rs.RegisterName("ClientCSI", &nodeCSI{s: s}); err != nil {
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

// call makes one RPC on the session (so that Node.Register binds it);
// args carry their node's credential. A transport failure drops the
// session and a call that was never sent is tried once more on the next
// server.
func (s *nodeSession) call(ctx context.Context, method string, args, reply any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var err error
	for range 2 {
		var conn *rpc.MuxClient
		if conn, err = s.session(ctx); err != nil {
			return err
		}
		err = conn.Call(ctx, method, args, reply)
		if err == nil || !errors.Is(err, rpc.ErrTransport) {
			return err
		}
		s.mu.Lock()
		if s.conn == conn {
			s.conn.Close()
			s.conn = nil
			s.next++
		}
		s.mu.Unlock()
		if !errors.Is(err, rpc.ErrNotSent) {
			return err
		}
	}
	return err
}

// close stops every node's heartbeat and closes the session.
func (s *nodeSession) close() {
	s.cancel()
	s.mu.Lock()
	nodes := make([]*simNode, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	s.mu.Unlock()
	for _, n := range nodes {
		n.stop()
	}
	s.wg.Wait()
}

// reportTerminal tells the servers the node's allocs are complete, as an
// agent does once it has stopped them (batches of maxBatch).
func (n *simNode) reportTerminal(ctx context.Context, allocIDs []string) error {
	for start := 0; start < len(allocIDs); start += maxBatch {
		ids := allocIDs[start:min(start+maxBatch, len(allocIDs))]
		req := &structs.AllocClientUpdateRequest{NodeID: n.id}
		req.AuthToken = n.secret
		for _, id := range ids {
			req.Allocs = append(req.Allocs, &structs.AllocClientUpdate{ID: id, ClientStatus: structs.AllocClientComplete})
		}
		if err := n.sess.call(ctx, "Node.UpdateAlloc", req, &structs.GenericResponse{}); err != nil {
			return fmt.Errorf("report allocs complete: %w", err)
		}
	}
	return nil
}

// stop ends the node's heartbeat once a heartbeat in flight has been
// answered (so that none reaches the servers after, say, the node's
// deregistration); the servers mark the node down after its TTL unless it
// was deregistered first.
func (n *simNode) stop() {
	n.quitOnce.Do(func() { close(n.quit) })
	n.wg.Wait()
	n.cancel()
}

// close stops the node, and its session when the node has one of its own.
func (n *simNode) close() {
	if n.ownSession {
		n.sess.close()
		return
	}
	n.stop()
}

// nodeCSI is the RPC receiver the servers call on a session. Only
// NodeDetachVolume is needed: the bench plugin has no controller, so the
// servers never send controller calls here.
type nodeCSI struct{ s *nodeSession }

// NodeDetachVolume succeeds at once for a node of this session: nothing
// was mounted (seed 6: "not mounted" is a success).
func (e *nodeCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	e.s.mu.Lock()
	n := e.s.nodes[args.NodeID]
	e.s.mu.Unlock()
	if n == nil {
		return structs.Invalid("node_id", fmt.Sprintf("%q is not a node of this session", args.NodeID))
	}
	n.detaches.Add(1)
	return nil
}
