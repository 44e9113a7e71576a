package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// InProcessOptions shape the in-process backend.
type InProcessOptions struct {
	// Workers is the number of client nodes with a node plugin (default 2).
	Workers int
	// HeartbeatTTL of client nodes (default 10 s, the production value):
	// a fault that cuts an agent off for longer marks its node down, which
	// the workload sees as allocations lost.
	HeartbeatTTL time.Duration
	// LogLevel of every component's log file (default "info";
	// CLAIMD_TEST_LOG overrides).
	LogLevel string
	// Agent, if set, adjusts each client agent's configuration (a node
	// lease, a fence command) by host name.
	Agent func(name string, cfg *client.Config)
}

// workloadHost is the network name the workload's clients dial as. It is
// cut off only by Pause (a stopped process answers nobody): like Jepsen's
// clients, the workload keeps talking to an isolated server, which is how
// stale reads and lost writes of a deposed leader would show.
const workloadHost = "workload"

// controllerHost is the client node that runs the controller plugin.
const controllerHost = "ctrl"

// NewInProcess starts the in-process backend: three servers on loopback
// (real Raft, boltdb, TCP through the harness's partitionable network),
// Workers client agents each with a hostdir node plugin, and one client
// agent with the hostdir controller plugin, all sharing one storage root.
//
// How the faults are realised in one process:
//
//   - Isolate, Bridge, IsolateWorker: harness network cuts (both
//     directions). An isolated server is cut from the other servers and
//     every client agent, not from the workload (see workloadHost).
//   - DropSYN(from, to): a one-way cut: every byte from → to is lost,
//     on new and existing connections (stronger than a SYN drop, which
//     spares established connections; the netns backend drops SYNs).
//   - SetLatency: every server↔server connection delays what it reads by
//     the latency, on both ends, so each direction gets it once; delay
//     lines keep byte order and do not limit throughput. Agent↔server
//     links get none.
//   - Kill: the server shuts down at once without leaving (Raft keeps what
//     boltdb synced); not a SIGKILL, so buffered writes still land.
//   - Pause: no SIGSTOP in one process: the server is cut off from every
//     host including the workload, but its clocks keep running: when it is
//     resumed it has noticed the lost leadership, while a really stopped
//     leader would wake believing it still leads (the netns backend covers
//     that).
//   - KillPlugin: the node plugin's gRPC server stops and its socket goes.
//   - Health: the process's goroutine count must come back under a bound
//     derived from the count right after start (a server panic crashes the
//     whole test binary, so panics need no check here).
func NewInProcess(t *testing.T, opts InProcessOptions) Cluster {
	t.Helper()
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.HeartbeatTTL <= 0 {
		opts.HeartbeatTTL = 10 * time.Second
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	if v := os.Getenv("CLAIMD_TEST_LOG"); v != "" {
		opts.LogLevel = v
	}
	ip := &inProcess{
		t: t, opts: opts, dir: t.TempDir(), logFiles: map[string]*os.File{},
		cuts: map[[2]string]bool{}, paused: map[string]bool{}, serverConns: map[string]bool{},
		plugins: map[string]*inprocPlugin{}, agents: map[string]*inprocAgent{},
	}
	ip.logDir = filepath.Join(ip.dir, "logs")
	ip.root = filepath.Join(ip.dir, "storage")
	if err := os.MkdirAll(ip.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: everything has stopped logging.
	t.Cleanup(ip.closeLogs)

	ip.hc = harness.NewCluster(t, 3, harness.Options{Configure: ip.configureServer,
		// The in-process suite covers the plaintext path; the netns suite
		// runs with TLS and ACLs on.
		Insecure: true})
	for _, s := range ip.hc.Servers {
		ip.serverAddrs = append(ip.serverAddrs, s.Addr)
	}
	ip.hc.StartAll()
	ip.hc.WaitForLeader(30 * time.Second)

	t.Cleanup(ip.stopAgentsAndPlugins)
	for i := 0; i < opts.Workers; i++ {
		name := fmt.Sprintf("w%d", i+1)
		p, err := ip.startPlugin(name, hostdir.ModeNode)
		if err != nil {
			t.Fatal(err)
		}
		// Spread the agents over the servers, so that node calls must
		// often be forwarded to the server that holds the session.
		order := append(append([]string{}, ip.serverAddrs[i%3:]...), ip.serverAddrs[:i%3]...)
		a, err := ip.startAgent(name, order, p.config())
		if err != nil {
			t.Fatal(err)
		}
		ip.workers = append(ip.workers, Worker{Name: name, NodeID: a.a.NodeID(), NodeAudit: p.audit})
	}
	ctrl, err := ip.startPlugin(controllerHost, hostdir.ModeController)
	if err != nil {
		t.Fatal(err)
	}
	rev := []string{ip.serverAddrs[2], ip.serverAddrs[1], ip.serverAddrs[0]}
	if _, err := ip.startAgent(controllerHost, rev, ctrl.config()); err != nil {
		t.Fatal(err)
	}
	ip.goroutineBase = runtime.NumGoroutine()
	return ip
}

type inProcess struct {
	t           *testing.T
	opts        InProcessOptions
	hc          *harness.Cluster
	dir         string
	logDir      string
	root        string
	serverAddrs []string

	logMu    sync.Mutex
	logFiles map[string]*os.File

	mu      sync.Mutex
	cuts    map[[2]string]bool // network faults in force
	paused  map[string]bool
	latency time.Duration
	// serverConns holds the local addresses of connections servers dialled
	// to servers, so the accepting end knows to delay them too.
	serverConns map[string]bool

	plugins map[string]*inprocPlugin
	agents  map[string]*inprocAgent
	workers []Worker

	goroutineBase int
}

// --- logs ---

func (ip *inProcess) logger(name string) hclog.Logger {
	ip.logMu.Lock()
	defer ip.logMu.Unlock()
	f := ip.logFiles[name]
	if f == nil {
		var err error
		f, err = os.OpenFile(filepath.Join(ip.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return hclog.NewNullLogger()
		}
		ip.logFiles[name] = f
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(ip.opts.LogLevel), Output: f})
}

func (ip *inProcess) closeLogs() {
	ip.logMu.Lock()
	defer ip.logMu.Unlock()
	for _, f := range ip.logFiles {
		f.Close()
	}
}

// --- servers ---

func (ip *inProcess) configureServer(cfg *server.Config) {
	cfg.Logger = ip.logger(cfg.NodeName)
	cfg.HeartbeatTTL = ip.opts.HeartbeatTTL
	cfg.ReleaseBackoffBase = 100 * time.Millisecond
	cfg.ReleaseBackoffMax = 2 * time.Second
	// Reconciliation runs often and repairs orphans of fence-policy
	// volumes (the mount pool) soon, so the tamper nemesis's orphans are
	// repaired by claimd within a run.
	cfg.ReconcileInterval = time.Second
	cfg.ReconcileRepairGrace = 2 * time.Second
	inner := cfg.Dialer
	cfg.Dialer = func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := inner(ctx, addr)
		if err != nil || !ip.isServerAddr(addr) {
			return conn, err
		}
		ip.mu.Lock()
		ip.serverConns[conn.LocalAddr().String()] = true
		ip.mu.Unlock()
		return newDelayConn(conn, ip.currentLatency), nil
	}
	cfg.Listener = &delayListener{Listener: cfg.Listener, ip: ip}
}

func (ip *inProcess) isServerAddr(addr string) bool {
	for _, a := range ip.serverAddrs {
		if a == addr {
			return true
		}
	}
	return false
}

func (ip *inProcess) currentLatency() time.Duration {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	return ip.latency
}

func (ip *inProcess) server(name string) (*harness.TestServer, error) {
	for _, s := range ip.hc.Servers {
		if s.Name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no server %q", name)
}

// --- plugins and agents ---

type inprocPlugin struct {
	name, socket, audit, control string
	mode                         hostdir.Mode
	ip                           *inProcess

	mu sync.Mutex
	p  *hostdir.Plugin
}

func (ip *inProcess) startPlugin(name string, mode hostdir.Mode) (*inprocPlugin, error) {
	sock, err := os.MkdirTemp("", "cldc")
	if err != nil {
		return nil, err
	}
	ip.t.Cleanup(func() { os.RemoveAll(sock) })
	p := &inprocPlugin{name: name, mode: mode, ip: ip, socket: filepath.Join(sock, "csi.sock"),
		audit: filepath.Join(ip.logDir, "audit-"+name+".jsonl"), control: filepath.Join(ip.dir, "control-"+name+".json")}
	ip.plugins[name] = p
	return p, p.start()
}

func (p *inprocPlugin) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil {
		return nil
	}
	plug, err := hostdir.New(hostdir.Config{
		Endpoint: "unix://" + p.socket, Root: p.ip.root, NodeID: "ext-" + p.name, Mode: p.mode,
		AuditLog: p.audit, ControlFile: p.control, AutoCreateVolumes: true,
		MountMethod: hostdir.MountSymlink, Logger: p.ip.logger("plugin-" + p.name),
	})
	if err != nil {
		return fmt.Errorf("plugin %s: %w", p.name, err)
	}
	if err := plug.Start(); err != nil {
		return fmt.Errorf("plugin %s: start: %w", p.name, err)
	}
	p.p = plug
	return nil
}

func (p *inprocPlugin) stop() {
	p.mu.Lock()
	plug := p.p
	p.p = nil
	p.mu.Unlock()
	if plug != nil {
		plug.Stop()
	}
}

func (p *inprocPlugin) config() csi.PluginConfig {
	typ := csi.PluginTypeNode
	if p.mode == hostdir.ModeController {
		typ = csi.PluginTypeController
	}
	return csi.PluginConfig{ID: PluginID, Type: typ, Socket: "unix://" + p.socket}
}

// inprocAgent is one client agent; a is nil while it is stopped
// (inproc_agents.go), cfg what it starts with.
type inprocAgent struct {
	a   *client.Agent
	cfg client.Config
}

func (ip *inProcess) startAgent(name string, servers []string, plugins ...csi.PluginConfig) (*inprocAgent, error) {
	cfg := client.Config{
		Servers: servers, DataDir: filepath.Join(ip.dir, "client-"+name), NodeName: name, Plugins: plugins,
		ProbeInterval: 200 * time.Millisecond, Logger: ip.logger("client-" + name),
		Dialer: ip.hc.Net.Dialer(name),
	}
	if ip.opts.Agent != nil {
		ip.opts.Agent(name, &cfg)
	}
	a, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("client %s: %w", name, err)
	}
	ag := &inprocAgent{a: a, cfg: cfg}
	ip.agents[name] = ag
	return ag, nil
}

func (ip *inProcess) stopAgentsAndPlugins() {
	ip.hc.Net.Heal()
	ip.mu.Lock()
	ip.latency = 0
	ip.mu.Unlock()
	for _, a := range ip.agents {
		if a.a != nil {
			a.a.Shutdown()
		}
	}
	for _, p := range ip.plugins {
		p.stop()
	}
}

// --- Cluster ---

func (ip *inProcess) Servers() []string {
	out := make([]string, len(ip.hc.Servers))
	for i, s := range ip.hc.Servers {
		out[i] = s.Name
	}
	return out
}

// Client returns a new client (the caller closes it) that dials as the
// workload host.
func (ip *inProcess) Client(name string) *api.Client {
	s, err := ip.server(name)
	if err != nil {
		panic(err)
	}
	c, err := api.NewClient(api.Config{Addresses: []string{s.Addr}, Timeout: 30 * time.Second, Dialer: ip.hc.Net.Dialer(workloadHost)})
	if err != nil {
		panic(err)
	}
	return c
}

// WorkloadClient implements Cluster: this backend runs plaintext without
// ACLs, so the workload's client is an ordinary one.
func (ip *inProcess) WorkloadClient(name string) *api.Client { return ip.Client(name) }

func (ip *inProcess) Workers() []Worker { return append([]Worker(nil), ip.workers...) }

func (ip *inProcess) ControllerAudit() string { return ip.plugins[controllerHost].audit }

func (ip *inProcess) StorageRoot() string { return ip.root }

// RepairWithin bounds how long the reconciler takes to detach an orphan
// of a fence-policy volume here: the grace (2 s) and a round (1 s), with
// room for a loaded machine.
func (ip *inProcess) RepairWithin() time.Duration { return 10 * time.Second }

func (ip *inProcess) Leader(context.Context) string {
	if l := ip.hc.Leader(); l != nil {
		return l.Name
	}
	return ""
}

// hosts other than the workload, for cuts.
func (ip *inProcess) otherHosts(host string) []string {
	var out []string
	for _, s := range ip.Servers() {
		if s != host {
			out = append(out, s)
		}
	}
	for name := range ip.agents {
		if name != host {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// applyCutsLocked sets the network to the faults plus the pauses, in one
// step.
func (ip *inProcess) applyCutsLocked() {
	var pairs [][2]string
	for p := range ip.cuts {
		pairs = append(pairs, p)
	}
	for s := range ip.paused {
		for _, o := range append(ip.otherHosts(s), workloadHost) {
			pairs = append(pairs, [2]string{s, o}, [2]string{o, s})
		}
	}
	ip.hc.Net.SetCuts(pairs)
}

func (ip *inProcess) cut(pairs ...[2]string) error {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	for _, p := range pairs {
		ip.cuts[p] = true
	}
	ip.applyCutsLocked()
	return nil
}

func both(a, b string) [][2]string { return [][2]string{{a, b}, {b, a}} }

func (ip *inProcess) Isolate(s string) error {
	if _, err := ip.server(s); err != nil {
		return err
	}
	var pairs [][2]string
	for _, o := range ip.otherHosts(s) {
		pairs = append(pairs, both(s, o)...)
	}
	return ip.cut(pairs...)
}

func (ip *inProcess) Bridge(a, b, c string) error { return ip.cut(both(a, c)...) }

func (ip *inProcess) DropSYN(from, to string) error { return ip.cut([2]string{from, to}) }

func (ip *inProcess) IsolateWorker(w string) error {
	if _, ok := ip.agents[w]; !ok {
		return fmt.Errorf("no worker %q", w)
	}
	var pairs [][2]string
	for _, s := range ip.Servers() {
		pairs = append(pairs, both(w, s)...)
	}
	return ip.cut(pairs...)
}

func (ip *inProcess) SetLatency(d time.Duration) error {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ip.latency = max(d, 0)
	return nil
}

func (ip *inProcess) Heal() error {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ip.cuts = map[[2]string]bool{}
	ip.latency = 0
	ip.applyCutsLocked()
	return nil
}

// killTimeout bounds a server's shutdown. A shutdown that hangs is a bug
// the run reports (the server is then treated as dead: its listener, Raft
// and stores are closed by the time it hangs, so a restart works).
const killTimeout = 30 * time.Second

func (ip *inProcess) Kill(s string) error {
	ts, err := ip.server(s)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ts.Stop()
	}()
	select {
	case <-done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("%s: server.Shutdown did not return within %s (see goroutines.txt with the logs)", s, killTimeout)
	}
}

func (ip *inProcess) Restart(s string) error {
	ts, err := ip.server(s)
	if err != nil {
		return err
	}
	if !ts.Running() {
		ts.Start()
	}
	return nil
}

func (ip *inProcess) Pause(s string) error {
	if _, err := ip.server(s); err != nil {
		return err
	}
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ip.paused[s] = true
	ip.applyCutsLocked()
	return nil
}

func (ip *inProcess) Resume(s string) error {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	delete(ip.paused, s)
	ip.applyCutsLocked()
	return nil
}

func (ip *inProcess) KillPlugin(w string) error {
	p, ok := ip.plugins[w]
	if !ok {
		return fmt.Errorf("no plugin on %q", w)
	}
	p.stop()
	return nil
}

func (ip *inProcess) RestartPlugin(w string) error {
	p, ok := ip.plugins[w]
	if !ok {
		return fmt.Errorf("no plugin on %q", w)
	}
	return p.start()
}

// Digest asks the server directly (not through the faulty network).
func (ip *inProcess) Digest(ctx context.Context, name string) (*structs.StateDigest, error) {
	s, err := ip.server(name)
	if err != nil {
		return nil, err
	}
	if !s.Running() {
		return nil, fmt.Errorf("%s is not running", name)
	}
	c, err := api.NewClient(api.Config{Addresses: []string{s.Addr}, Dialer: rpc.DefaultDialer})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.StateDigest(ctx)
}

// goroutineBound: after the run, once the workload has stopped and the
// faults healed, the process may hold this many times the goroutines it
// had right after start, plus slack for idle connections and timers.
const (
	goroutineFactor = 3
	goroutineSlack  = 300
)

// Health polls (up to 20 s) until the goroutine count is under the bound.
func (ip *inProcess) Health() error {
	bound := ip.goroutineBase*goroutineFactor + goroutineSlack
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= bound {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines, bound %d (%d right after start): a leak (a goroutine dump is saved with the logs)",
				n, bound, ip.goroutineBase)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// SaveLogs copies every component's log, the audit logs and a goroutine
// dump into dir.
func (ip *inProcess) SaveLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(ip.logDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, copyFile(filepath.Join(ip.logDir, e.Name()), filepath.Join(dir, e.Name())))
	}
	if f, err := os.Create(filepath.Join(dir, "goroutines.txt")); err == nil {
		errs = append(errs, pprof.Lookup("goroutine").WriteTo(f, 2), f.Close())
	} else {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
