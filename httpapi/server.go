package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"golang.org/x/net/netutil"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/tlsutil"
)

// maxConns bounds the HTTP connections an agent holds at once: far more
// than operators, scripts and UIs open, few enough that each holding a
// head and a small body is a bounded cost.
const maxConns = 512

// DefaultAddr is where the agent serves the API without -http-addr.
const DefaultAddr = "127.0.0.1:4646"

// Config configures an HTTP API server.
type Config struct {
	// Addr is the host:port to listen on (":0" picks a port; see Addr()).
	Addr string
	// TLS, when set, makes the listener HTTPS with a required client
	// certificate, and the handlers' RPC session TLS with this agent's
	// certificate. Nil: plain HTTP and plaintext RPC.
	TLS *tlsutil.Configurator
	// RPCAddrs are the servers the handlers call: this agent's own server,
	// or a client agent's -servers.
	RPCAddrs []string
	// Dialer dials the RPC addresses (nil: TCP). Tests pass their network's.
	Dialer rpc.Dialer
	// Server, when the agent runs a server, is asked for Raft's state by
	// the health check (*server.Server satisfies it).
	Server RaftSource
	// Client, when the agent runs a client agent, is asked for its
	// session and plugins by the health check (*client.Agent).
	Client ClientSource
	// Self is what GET /v1/agent/self shows. The caller redacts the
	// configuration: this package shows it as given.
	Self Self
	// MaxApplyLag is how far a server's applied index may trail its commit
	// index before the health check fails (0: DefaultMaxApplyLag).
	MaxApplyLag uint64
	// Metrics serves GET /v1/metrics once the caller's token is checked
	// (telemetry.Telemetry's Handler); nil: the route answers 404.
	Metrics http.Handler
	// AllowedHosts are the names, besides IP addresses, localhost and
	// this machine's own name, a request over plain HTTP may address
	// the API by (its Host header; hosts.go). Unused with TLS.
	AllowedHosts []string
	Logger       hclog.Logger
}

// RaftSource is what the health check needs of a server.
type RaftSource interface {
	Raft() *raft.Raft
}

// ClientSource is what the health check needs of a client agent.
type ClientSource interface {
	Health() client.Health
}

// Server is one agent's HTTP API. Build it with New, add routes with
// Handle (other packages' endpoints such as metrics), then Start.
type Server struct {
	cfg    Config
	logger hclog.Logger
	api    *api.Client
	mux    *http.ServeMux
	// patterns are the routes' patterns, in registration order (a test
	// checks that docs/http-api.md shows each).
	patterns []string

	// base is every request's parent context: Shutdown cancels it, so
	// blocking queries in flight end at once instead of holding shutdown.
	base   context.Context
	cancel context.CancelFunc

	// largeBodies holds a slot per request body over smallBody being
	// read (guard.go).
	largeBodies chan struct{}
	// bodyTimeout is bodyReadTimeout (tests shorten it).
	bodyTimeout time.Duration
	// crossOrigin refuses state-changing requests a browser marks as
	// coming from another origin (guard.go).
	crossOrigin *http.CrossOriginProtection
	// hosts are the names a plain-HTTP request's Host may carry
	// (hosts.go); nil with TLS.
	hosts map[string]bool

	mu       sync.Mutex
	http     *http.Server
	listener net.Listener
}

// New builds the server and its routes; it does not listen yet.
func New(cfg Config) (*Server, error) {
	if len(cfg.RPCAddrs) == 0 {
		return nil, errors.New("httpapi: at least one RPC address is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxApplyLag == 0 {
		cfg.MaxApplyLag = DefaultMaxApplyLag
	}
	if cfg.Self.Version == "" {
		cfg.Self.Version = Version()
	}
	apiCfg := api.Config{Addresses: cfg.RPCAddrs, Dialer: cfg.Dialer, Logger: cfg.Logger.Named("rpc")}
	if cfg.TLS != nil {
		// OutgoingConfig reads the certificate and CA at each handshake, so
		// a SIGHUP reload reaches this session's next connection.
		apiCfg.TLS = cfg.TLS.OutgoingConfig()
	}
	// No Token in apiCfg: a request without X-Claimd-Token must reach the
	// servers as anonymous, never with a credential of the agent's.
	cl, err := api.NewClient(apiCfg)
	if err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, logger: cfg.Logger, api: cl, mux: http.NewServeMux(), base: base, cancel: cancel,
		largeBodies: make(chan struct{}, maxLargeBodies), bodyTimeout: bodyReadTimeout,
		crossOrigin: http.NewCrossOriginProtection()}
	if cfg.TLS == nil {
		s.hosts = allowedHosts(cfg.AllowedHosts)
	}
	s.routes()
	return s, nil
}

// Handle adds a route (a Go 1.22 pattern such as "GET /v1/metrics"). Call
// it before Start.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP serves one request: the route's handler, or a JSON 404 or 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every body, even one sent to no route, has a deadline before
	// anything reads it (guard.go).
	s.limitBodyRead(w, r)
	if !s.hostAllowed(r.Host) {
		writeJSONError(w, http.StatusForbidden, "permission_denied", fmt.Sprintf(
			"Host %q: over plain HTTP this agent answers only requests addressed to an IP address, localhost, its machine's name or a name in -http-allowed-hosts (a page on another domain pointed at this address sends its own name: DNS rebinding)",
			r.Host))
		return
	}
	if _, pattern := s.mux.Handler(r); pattern != "" {
		release, ok := s.guard(w, r, pattern)
		defer release()
		if ok {
			s.mux.ServeHTTP(w, r)
		}
		return
	}
	// No route: let the mux decide between 404, 405 (with Allow) and a
	// path-cleaning redirect, and answer the errors in JSON like the rest.
	rec := &statusRecorder{header: http.Header{}}
	h, _ := s.mux.Handler(r)
	h.ServeHTTP(rec, r)
	switch rec.code {
	case http.StatusNotFound:
		writeJSONError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		writeJSONError(w, http.StatusMethodNotAllowed, "method_not_allowed",
			fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, rec.header.Get("Allow")))
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		w.WriteHeader(rec.code)
	}
}

// statusRecorder keeps the status and headers of the mux's own answer.
type statusRecorder struct {
	header http.Header
	code   int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.code = code }

// Start listens on Config.Addr and serves in the background.
func (s *Server) Start() error {
	l, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", s.cfg.Addr, err)
	}
	// At most maxConns connections at once (each may hold a request head
	// and a body being read); more wait in the kernel's backlog. Under
	// the TLS listener, so that net/http still sees a *tls.Conn (and
	// requests their TLS state).
	l = netutil.LimitListener(l, maxConns)
	if s.cfg.TLS != nil {
		// The same handshake as the RPC port: TLS 1.3, a client
		// certificate from the cluster's CA required, files reloaded on
		// SIGHUP. No ALPN: HTTP/1.1.
		l = tls.NewListener(l, s.cfg.TLS.IncomingConfig())
	}
	hs := &http.Server{
		Handler: s,
		// The head of a request must arrive within ReadHeaderTimeout; its
		// body within a deadline guard sets per route (limitBodyRead):
		// one ReadTimeout for all would either cut a snapshot archive's
		// upload or let a JSON body trickle for ten minutes. There is no
		// WriteTimeout: a blocking query's answer may come 10 minutes
		// after its request, and a snapshot download may take longer.
		MaxHeaderBytes: 64 << 10,
		// Bounds the TLS handshake and the request head.
		ReadHeaderTimeout: headerReadTimeout,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		// Failed handshakes (a health checker without a certificate)
		// would flood the log at a higher level.
		ErrorLog: s.logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	s.mu.Lock()
	s.http, s.listener = hs, l
	s.mu.Unlock()
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http server stopped", "error", err)
		}
	}()
	s.logger.Info("HTTP API listening", "url", s.URL())
	return nil
}

// Addr is the address listened on (after Start), else Config.Addr.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return s.listener.Addr().String()
	}
	return s.cfg.Addr
}

// URL is the API's base URL, http:// or https:// (after Start).
func (s *Server) URL() string {
	if s.cfg.TLS != nil {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Shutdown stops listening, ends requests in flight (blocking queries
// answer at once with the error of their cancelled call) and closes the
// RPC session.
func (s *Server) Shutdown() error {
	s.cancel()
	s.mu.Lock()
	hs := s.http
	s.mu.Unlock()
	var err error
	if hs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err = hs.Shutdown(ctx); err != nil {
			err = hs.Close()
		}
	}
	s.api.Close()
	return err
}
