package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// TestMultiplier scales Raft timeouts in tests: elections in well under a
// second, slow enough not to churn on a busy 2-core machine under -race
// (0.2 lost leadership under 64 concurrent sessions with -race).
const TestMultiplier = 0.5

// Options tune a cluster.
type Options struct {
	// SnapshotThreshold and TrailingLogs, when set, force frequent
	// snapshots so that a lagging server must install one.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// BootstrapExpect defaults to the number of servers.
	BootstrapExpect int
	// Configure is applied to every server's config last.
	Configure func(*server.Config)
	// ConfigureClient is applied to every client agent's config before
	// the agent's own edit.
	ConfigureClient func(*client.Config)
	// Insecure turns TLS and ACLs off, for tests of the plaintext path.
	// By default a cluster runs as production should: mutual TLS (a test
	// PKI made by NewPKI, client agents with client certificates, api
	// clients with a cli certificate) and ACLs, with the management token
	// bootstrapped on first use (ManagementToken, and every Client()).
	Insecure bool
}

// Cluster is a set of in-process servers on loopback.
type Cluster struct {
	t       testing.TB
	opts    Options
	Net     *Network
	Servers []*TestServer
	sec     security
}

// TestServer is one server slot: its name, address and data dir survive
// stop and restart.
type TestServer struct {
	Name    string
	Addr    string
	DataDir string
	c       *Cluster

	mu  sync.Mutex
	srv *server.Server
}

// NewCluster prepares n servers (not started): addresses are reserved so
// that every server can be told the others' addresses as -join.
func NewCluster(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if opts.BootstrapExpect == 0 {
		opts.BootstrapExpect = n
	}
	c := &Cluster{t: t, opts: opts, Net: NewNetwork()}
	if !opts.Insecure {
		c.sec.pki = NewPKI(t)
	}
	base := t.TempDir()
	for i := 0; i < n; i++ {
		c.addSlot(fmt.Sprintf("s%d", i+1), base)
	}
	t.Cleanup(c.StopAll)
	return c
}

func (c *Cluster) addSlot(name, base string) *TestServer {
	addr := freeAddr(c.t)
	ts := &TestServer{Name: name, Addr: addr, DataDir: filepath.Join(base, name), c: c}
	c.Net.AddHost(name, addr)
	c.Servers = append(c.Servers, ts)
	return ts
}

// AddServer adds and starts a server after the cluster formed; it joins
// through the existing servers.
func (c *Cluster) AddServer() *TestServer {
	ts := c.addSlot(fmt.Sprintf("s%d", len(c.Servers)+1), c.t.TempDir())
	ts.Start()
	return ts
}

// freeAddr reserves a loopback port for a server that will listen on it
// later, sometimes seconds later (a test may start one server and let the
// others come up after a while). The port comes from below Linux's
// ephemeral range (32768-60999 by default): a port from the kernel's ":0"
// is an ephemeral one, and any outgoing connection on the machine meanwhile
// (another server dialling, a client) may take it as its source port, so
// that the server's listen fails with "address already in use". A port
// below the range is only ever taken by a listener; the probe checks none
// holds it, and a port is handed out once per test process.
func freeAddr(t testing.TB) string {
	t.Helper()
	reservedMu.Lock()
	defer reservedMu.Unlock()
	for range 1000 {
		port := reservedLow + rand.IntN(reservedHigh-reservedLow)
		if reserved[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		reserved[port] = true
		return addr
	}
	t.Fatalf("reserve port: no free port in %d-%d after 1000 tries", reservedLow, reservedHigh)
	return ""
}

const reservedLow, reservedHigh = 10000, 32000

var (
	reservedMu sync.Mutex
	reserved   = map[int]bool{}
)

// StartAll starts every server in slot order.
func (c *Cluster) StartAll() {
	for _, s := range c.Servers {
		s.Start()
	}
}

// StopAll shuts every running server down (keeps data dirs).
func (c *Cluster) StopAll() {
	for _, s := range c.Servers {
		s.Stop()
	}
}

// Start starts (or restarts on its data dir) this server.
func (s *TestServer) Start() {
	c := s.c
	c.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	var join []string
	for _, o := range c.Servers {
		if o != s {
			join = append(join, o.Addr)
		}
	}
	var l net.Listener
	var err error
	// The port was just freed by a stopped server; retry briefly while the
	// kernel lets go of it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err = net.Listen("tcp", s.Addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("%s: listen on %s: %v", s.Name, s.Addr, err)
	}
	cfg := server.Config{
		NodeName:          s.Name,
		DataDir:           s.DataDir,
		Listener:          l,
		BootstrapExpect:   c.opts.BootstrapExpect,
		Join:              join,
		JoinInterval:      100 * time.Millisecond,
		RaftMultiplier:    TestMultiplier,
		SnapshotThreshold: c.opts.SnapshotThreshold,
		TrailingLogs:      c.opts.TrailingLogs,
		Logger:            testLogger(c.t, s.Name),
		Dialer:            c.Net.Dialer(s.Name),
		// Fast liveness and retries so release tests finish in seconds.
		HeartbeatTTL:       2 * time.Second,
		ReleaseBackoffBase: 100 * time.Millisecond,
		ReleaseBackoffMax:  time.Second,
		ACLEnabled:         !c.opts.Insecure,
	}
	if c.sec.pki != nil {
		cfg.TLS = c.sec.pki.Configurator(c.t, tlsutil.RoleServer)
	}
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		l.Close()
		c.t.Fatalf("%s: start: %v", s.Name, err)
	}
	s.srv = srv
}

// Stop shuts the server down without leaving (like a kill: the data dir
// keeps whatever was fsynced).
func (s *TestServer) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		if err := srv.Shutdown(); err != nil {
			s.c.t.Logf("%s: shutdown: %v", s.Name, err)
		}
	}
}

// Server returns the running server, or nil.
func (s *TestServer) Server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Running reports whether the server is up.
func (s *TestServer) Running() bool { return s.Server() != nil }

// Client returns an API client connected to this server only, with the
// cluster's TLS settings and (when ACLs are on) the management token.
func (s *TestServer) Client() *api.Client {
	cfg := s.c.APIConfig(s.Addr, "")
	cfg.TokenFunc = s.c.lazyManagementToken
	return s.newClient(cfg)
}

// IsLeader reports whether this running server leads.
func (s *TestServer) IsLeader() bool {
	srv := s.Server()
	return srv != nil && srv.Raft().State() == raft.Leader
}

// Leader returns the single running leader, or nil when there is none or
// more than one server believes it leads.
func (c *Cluster) Leader() *TestServer {
	var found *TestServer
	for _, s := range c.Servers {
		if s.IsLeader() {
			if found != nil {
				return nil
			}
			found = s
		}
	}
	return found
}

// WaitForLeader polls until one running server leads and every running
// server knows it.
func (c *Cluster) WaitForLeader(timeout time.Duration) *TestServer {
	c.t.Helper()
	var leader *TestServer
	WaitFor(c.t, timeout, func() error {
		leader = c.Leader()
		if leader == nil {
			return errors.New("no single leader")
		}
		for _, s := range c.Servers {
			srv := s.Server()
			if srv == nil {
				continue
			}
			if addr, _ := srv.Raft().LeaderWithID(); string(addr) != leader.Addr {
				return fmt.Errorf("%s sees leader %q, exp: %s", s.Name, addr, leader.Addr)
			}
		}
		return nil
	})
	return leader
}

// WaitForHolderDetach waits until the leader writes the entries that record
// a holding node's own node detach (every server has reported
// structs.FeatureHolderDetached, decision 61). Before that, and for a
// moment after each election, every release takes the servers' node
// detach: a test of either path waits for this first.
func (c *Cluster) WaitForHolderDetach(timeout time.Duration) {
	c.t.Helper()
	WaitFor(c.t, timeout, func() error {
		l := c.Leader()
		if l == nil || l.Server() == nil {
			return errors.New("no single leader")
		}
		if !l.Server().AllServersSupport(structs.FeatureHolderDetached) {
			return fmt.Errorf("leader %s: every server reported the holder-detached entries exp: yes got: not yet", l.Name)
		}
		return nil
	})
}

// Followers returns the running servers that are not the leader.
func (c *Cluster) Followers() []*TestServer {
	var out []*TestServer
	for _, s := range c.Servers {
		if s.Running() && !s.IsLeader() {
			out = append(out, s)
		}
	}
	return out
}

// WaitForApplied polls until every running server has applied at least index.
func (c *Cluster) WaitForApplied(index uint64, timeout time.Duration) {
	c.t.Helper()
	WaitFor(c.t, timeout, func() error {
		for _, s := range c.Servers {
			srv := s.Server()
			if srv == nil {
				continue
			}
			if got := srv.Raft().AppliedIndex(); got < index {
				return fmt.Errorf("%s applied index exp: >= %d got: %d", s.Name, index, got)
			}
		}
		return nil
	})
}

// WaitFor polls fn until it returns nil or the timeout passes, then fails
// the test with fn's last error (testutil.WaitFor). This is how tests
// wait: never a fixed sleep.
func WaitFor(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	testutil.WaitFor(t, timeout, fn)
}

// Ctx returns a context bounded for one test call.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testLogger logs to the test output when CLAIMD_TEST_LOG is set, else
// only warnings and errors, so failing runs still say what went wrong.
func testLogger(t testing.TB, name string) hclog.Logger {
	level := hclog.Warn
	if v := os.Getenv("CLAIMD_TEST_LOG"); v != "" {
		level = hclog.LevelFromString(v)
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: &testWriter{t: t}})
}

type testWriter struct {
	t  testing.TB
	mu sync.Mutex
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { _ = recover() }() // the test may have finished
	w.t.Log(string(p[:len(p)-min(1, len(p))]))
	return len(p), nil
}
