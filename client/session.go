package client

import (
	"context"
	"errors"
	netrpc "net/rpc"
	"sync"
	"time"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// serverConn keeps the agent's one session to a server. Calls the agent
// makes go out on it; calls servers make arrive on it and are served by
// handlers. When the session fails the next call dials the next server.
type serverConn struct {
	a *Agent

	mu      sync.Mutex
	servers []string
	next    int
	conn    *rpc.MuxClient
	// connected is closed and replaced each time a new session starts, so
	// the heartbeat loop re-registers at once on the new server.
	connected chan struct{}
	// dial is the agent's dialer, TLS when TLS is on.
	dial rpc.Dialer
}

func newServerConn(a *Agent, servers []string) *serverConn {
	dial := a.cfg.Dialer
	if a.cfg.TLS != nil {
		dial = rpc.TLSDialer(dial, a.cfg.TLS.OutgoingConfig, a.cfg.TLSAllowPlaintext)
	}
	return &serverConn{a: a, servers: append([]string(nil), servers...), connected: make(chan struct{}), dial: dial}
}

// setServers merges addresses the servers told us about.
func (s *serverConn) setServers(addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range s.servers {
		seen[a] = true
	}
	for _, a := range addrs {
		if !seen[a] {
			s.servers = append(s.servers, a)
			seen[a] = true
		}
	}
}

// live reports whether a session to a server is open now.
func (s *serverConn) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil && !s.conn.IsClosed()
}

func (s *serverConn) connectedCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

// session returns the live session, dialling servers in turn if needed.
func (s *serverConn) session(ctx context.Context) (*rpc.MuxClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	var lastErr error
	for range s.servers {
		addr := s.servers[s.next%len(s.servers)]
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := rpc.DialMux(dctx, s.dial, addr, s.a.logger)
		cancel()
		if err == nil {
			s.conn = conn
			s.a.logger.Info("connected to server", "addr", addr)
			go s.serve(conn)
			close(s.connected)
			s.connected = make(chan struct{})
			return conn, nil
		}
		lastErr = err
		s.next++
	}
	return nil, lastErr
}

// serve answers the calls servers open on the session.
func (s *serverConn) serve(conn *rpc.MuxClient) {
	rs := netrpc.NewServer()
	if err := rs.RegisterName("ClientCSI", &csiEndpoint{a: s.a}); err != nil {
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

// drop closes a failed session so the next call moves to the next server.
func (s *serverConn) drop(conn *rpc.MuxClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == conn {
		s.conn.Close()
		s.conn = nil
		s.next++
	}
}

// rotate drops the current session so the next call dials the next
// server, even though the session itself still works.
func (s *serverConn) rotate() {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		s.a.logger.Info("moving to another server")
		s.drop(conn)
	}
}

func (s *serverConn) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// call makes one RPC. A transport failure drops the session; a call that
// was not sent is retried once on the next server; a refusal with a
// retry-after hint is retried when it says.
func (s *serverConn) call(ctx context.Context, method string, args, reply any) error {
	// Every call authenticates as this node with its secret, except a
	// registration, which may need an ACL token for a node the servers do
	// not know yet (Config.RegisterToken; a known node re-registers with
	// the secret in the node itself).
	if a, ok := args.(structs.Authenticated); ok && a.Token() == "" {
		a.SetToken(s.a.ident.Secret)
		if method == "Node.Register" && s.a.cfg.RegisterToken != "" {
			a.SetToken(s.a.cfg.RegisterToken)
		}
	}
	for {
		err := s.callOnce(ctx, method, args, reply)
		// A server with no room for the call now (a read past its
		// limits, a new node past its certificate's rate) refused it
		// before doing anything and said when to come back: wait that
		// out while ctx allows, never ask again at once.
		if !structs.WaitRetryAfter(ctx, err) {
			return err
		}
	}
}

func (s *serverConn) callOnce(ctx context.Context, method string, args, reply any) error {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var conn *rpc.MuxClient
		conn, err = s.session(ctx)
		if err != nil {
			return err
		}
		err = conn.Call(ctx, method, args, reply)
		if err == nil || !errors.Is(err, rpc.ErrTransport) {
			return err
		}
		s.drop(conn)
		if !errors.Is(err, rpc.ErrNotSent) {
			return err
		}
	}
	return err
}
