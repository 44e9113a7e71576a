package chaos

// The network-namespace backend: every claimd server, client agent and CSI
// plugin is a real OS process, each host in its own network namespace of a
// netlab lab, and network faults are nftables rules in those namespaces.
//
//	hosts (one namespace each, on one bridge, 10.213.7.0/24)
//	  s1 s2 s3      claimd agent -server, bound on <ip>:4647
//	  w1 … wN       claimd agent -client + claimd csi-plugin hostdir -mode node
//	  ctrl          claimd agent -client + claimd csi-plugin hostdir -mode controller
//	  workload      no process: the test's API clients dial from here
//
// Why these choices:
//
//   - Latency. The kernel has no netem, so delay comes from netlab's
//     DelayProxy, a user-space TCP proxy. Each server advertises (-advertise)
//     <ip>:4648, where a DelayProxy runs inside that server's own namespace
//     and relays to <ip>:4647. Every server↔server connection (Raft,
//     forwarding, bootstrap hellos) dials the advertised address, so it
//     crosses exactly one proxy: SetLatency(d) delays each direction of every
//     server↔server link by d (jitter d/10), and Raft round trips grow by 2d.
//     The proxy listens in the dialled server's namespace, so a packet from
//     s2 to s1's proxy still crosses the s2→s1 veth and every nftables cut
//     applies to it exactly as to a direct connection. With 0 delay the proxy
//     is a plain relay. Client agents start with the servers' direct
//     addresses but learn the Raft members' (advertised) addresses from
//     heartbeat answers, so after a failover an agent may also reach a server
//     through its proxy and see the added latency; the workload's API clients
//     always dial the direct address and never do.
//   - Processes run through Lab.Exec (`ip netns exec` execs in place), so
//     the pid is claimd's own and SIGKILL/SIGSTOP/SIGCONT reach it directly.
//     Each gets Pdeathsig=SIGKILL, so a test binary that dies does not leave
//     claimd processes running (the signal follows the forking OS thread,
//     and Go ends a thread only when a goroutine exits locked to it, which
//     netlab does only when it cannot switch a thread back); the lab's
//     cleanup also kills whatever is still inside its namespaces.
//   - Plugins talk to their agents over unix sockets, which are not
//     namespaced; a plugin runs in its agent's namespace only so that the lab
//     cleans it up with the rest. They present volumes with symlinks
//     (-mount symlink), so a killed plugin never leaves a bind mount behind
//     in the test's temp dirs.
//   - Server flags that shorten liveness timers (-heartbeat-ttl and friends)
//     are passed only when the built binary lists them in `agent -help`, so
//     this backend runs against older and newer binaries alike.
//   - Security. By default the cluster runs as production should: mutual
//     TLS everywhere (a test CA from harness.NewPKI; each server its own
//     server certificate, each client agent its own client certificate,
//     every API client the cli certificate) and ACLs on every server. The
//     certificates name roles (server.global.claimd), not addresses: the
//     agents verify that name, so namespace IPs need no SANs and the
//     latency proxies, which relay bytes, are transparent to TLS. Once a
//     leader is elected the backend bootstraps ACLs; the management token
//     serves the operator's clients (Client, the backend's probes) and the
//     workload runs with a token of its own whose policy grants only what
//     it calls (WorkloadClient, nsWorkloadPolicy). CheckSecured proves at
//     the end that the cluster really was secured. NetnsOptions.Insecure
//     (or -chaos.netns-insecure) runs plaintext with ACLs off, to compare.
//   - Health scans the log files for a Go runtime "panic: " or
//     "fatal error: " at the start of a line and for race reports, and
//     reports processes that exited without being killed. It does not bound
//     goroutines: a claimd process exposes no goroutine count (a Status RPC
//     returning runtime.NumGoroutine would let Health check a bound).

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/integration/netlab"
	"github.com/claimd/claimd/internal/faultpoint"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

const (
	// nsServerPort is where each server binds on its namespace's address;
	// nsPeerPort is its latency proxy, the address it advertises.
	nsServerPort = "4647"
	nsPeerPort   = "4648"
	// nsWorkloadHost is the namespace the API clients dial from.
	nsWorkloadHost = "workload"
	// nsControllerHost runs the controller plugin and its agent.
	nsControllerHost = "ctrl"
	// nsPluginID is the CSI plugin ID every plugin registers under.
	nsPluginID = "hostdir"
	// nsStopWait bounds waiting for a killed process to be reaped and a
	// restarted one to listen: both take milliseconds, and one that takes
	// this long is a failure worth its own error.
	nsStopWait  = 10 * time.Second
	nsStartWait = 20 * time.Second
)

// NetnsOptions tune the network-namespace backend. The zero value is what
// the chaos suite uses.
type NetnsOptions struct {
	// Workers is the number of client nodes with a node plugin (default 2).
	Workers int
	// RaftMultiplier scales the servers' Raft timeouts (default 0.5:
	// elections in about a second, calm on a busy two-core machine).
	RaftMultiplier float64
	// HeartbeatTTL is the servers' node heartbeat TTL (default 2 s), passed
	// as -heartbeat-ttl when the binary has that flag.
	HeartbeatTTL time.Duration
	// LogLevel of every process (default "debug"); LogJSON makes the
	// agents log JSON lines.
	LogLevel string
	LogJSON  bool
	// ServerArgs are extra flags for every server.
	ServerArgs []string
	// DirectPeers makes servers dial each other directly instead of
	// through the latency proxies; SetLatency then returns an error.
	DirectPeers bool
	// StartTimeout bounds forming the cluster and registering every node
	// and plugin (default 60 s).
	StartTimeout time.Duration
	// WorkerArgs are extra agent flags for one worker, by host name (a
	// node lease, a fence command, a lease clock rate).
	WorkerArgs map[string][]string
	// Insecure runs every process in plaintext with ACLs off. By default
	// the cluster runs mutual TLS with ACLs on (see the package comment of
	// this file).
	Insecure bool
}

func (o *NetnsOptions) setDefaults() {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.RaftMultiplier <= 0 {
		o.RaftMultiplier = harness.TestMultiplier
	}
	if o.HeartbeatTTL <= 0 {
		o.HeartbeatTTL = 2 * time.Second
	}
	if o.LogLevel == "" {
		o.LogLevel = "debug"
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
}

// nsServerFlags are server flags that speed the system up for tests and
// that the binary may or may not have; each is passed only when `agent
// -help` lists it. The release backoff flags do not exist yet: with the
// built-in 1 s–1 min backoff a release that failed a few times under faults
// can wait up to a minute after they heal.
func nsServerFlags(o NetnsOptions) [][2]string {
	return [][2]string{
		{"-heartbeat-ttl", o.HeartbeatTTL.String()},
		{"-claim-gc-interval", "5s"},
		{"-release-backoff-base", "100ms"},
		{"-release-backoff-max", "1s"},
	}
}

// netnsCluster implements Cluster with OS processes in a netlab lab.
type netnsCluster struct {
	t       *testing.T
	lab     *netlab.Lab
	bin     string
	opts    NetnsOptions
	logDir  string
	dataDir string
	// pki is the test CA and certificates (nil with Insecure); cliTLS is
	// the API clients' TLS configuration, made once from its cli
	// certificate.
	pki     *harness.PKI
	cliTLS  *tls.Config
	root    string // hostdir root shared by every plugin
	names   []string
	servers map[string]*nsServer
	workers []*nsWorker
	ctrl    *nsWorker
	byAddr  map[string]string // direct and advertised address → server name

	mu       sync.Mutex
	clients  []*api.Client          // handed out by Client, closed at the end
	ctl      map[string]*api.Client // the backend's own, short timeouts
	proxies  map[string]*netlab.DelayProxy
	latency  time.Duration
	allProcs []*nsProc
	stopping bool
	// mgmtToken is the bootstrap management token, workToken the
	// workload's; both "" until bootstrapACL made them, and with Insecure.
	mgmtToken, workToken string
}

type nsServer struct {
	name     string
	addr     string // bound, direct
	peerAddr string // advertised: the proxy, or addr with DirectPeers
	proc     *nsProc
	// faultPoints is the file the server's $CLAIMD_FAULT_POINTS names.
	faultPoints string
}

type nsWorker struct {
	name    string
	nodeID  string
	socket  string
	audit   string
	control string
	agent   *nsProc
	plugin  *nsProc
}

// NewNetns starts the network-namespace backend: three servers, opts.Workers
// client nodes and a controller node, each host in its own namespace, and
// returns once a leader is elected and every node plugin and the controller
// plugin are registered healthy. It skips the test when the machine cannot
// run a netlab lab (not root, no nft), or fails it when
// CLAIMD_NETLAB_REQUIRED is set. Everything stops and is removed when the
// test ends; a failed test's logs are kept in a temp dir whose path is
// logged.
func NewNetns(t *testing.T, opts NetnsOptions) Cluster {
	t.Helper()
	opts.setDefaults()
	hosts := []string{"s1", "s2", "s3"}
	var workerNames []string
	for i := 1; i <= opts.Workers; i++ {
		workerNames = append(workerNames, "w"+strconv.Itoa(i))
	}
	hosts = append(hosts, workerNames...)
	hosts = append(hosts, nsControllerHost, nsWorkloadHost)
	lab := netlab.New(t, hosts...) // skips or fails without root and nft

	// Every directory exists before the shutdown cleanup is registered, so
	// that their removal (cleanups run last-in first-out) comes after the
	// processes writing into them are gone. Unix socket paths must stay
	// under 108 bytes and test temp dirs can be long, so sockets live in a
	// short directory of their own.
	sockDir, err := os.MkdirTemp("", "cldns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	logDir, dataDir, storage := t.TempDir(), t.TempDir(), t.TempDir()
	c := &netnsCluster{
		t:       t,
		lab:     lab,
		bin:     harness.Binary(t),
		opts:    opts,
		logDir:  logDir,
		dataDir: dataDir,
		root:    storage,
		names:   []string{"s1", "s2", "s3"},
		servers: map[string]*nsServer{},
		byAddr:  map[string]string{},
		ctl:     map[string]*api.Client{},
		proxies: map[string]*netlab.DelayProxy{},
	}
	if !opts.Insecure {
		c.pki = harness.NewPKI(t)
		c.cliTLS = c.pki.CLIConfig(t)
	}
	// Registered after the lab's cleanup, so it runs before it: processes
	// and proxies stop while the namespaces still exist.
	t.Cleanup(c.shutdown)

	supported := c.serverFlagsSupported()
	for _, name := range c.names {
		ip := lab.Addr(name)
		s := &nsServer{name: name, addr: net.JoinHostPort(ip, nsServerPort), peerAddr: net.JoinHostPort(ip, nsServerPort)}
		if !opts.DirectPeers {
			s.peerAddr = net.JoinHostPort(ip, nsPeerPort)
			ln, err := lab.Listen(name, s.peerAddr)
			if err != nil {
				t.Fatalf("netns: latency proxy for %s: %v", name, err)
			}
			c.proxies[name] = netlab.NewDelayProxy(ln, lab.Dialer(name), s.addr, 0, 0)
		}
		c.servers[name] = s
		c.byAddr[s.addr], c.byAddr[s.peerAddr] = name, name
	}
	for _, name := range c.names {
		s := c.servers[name]
		var join []string
		for _, o := range c.names {
			if o != name {
				join = append(join, c.servers[o].peerAddr)
			}
		}
		args := []string{"agent", "-server", "-bootstrap-expect", "3",
			"-join", strings.Join(join, ","), "-bind", s.addr, "-advertise", s.peerAddr,
			"-data-dir", filepath.Join(dataDir, name), "-node-name", name,
			"-raft-multiplier", strconv.FormatFloat(opts.RaftMultiplier, 'f', -1, 64),
			"-log-level", opts.LogLevel}
		if opts.LogJSON {
			args = append(args, "-log-json")
		}
		args = append(args, supported...)
		if !opts.Insecure {
			args = append(args, c.tlsArgs(tlsutil.RoleServer, "server-"+name)...)
			args = append(args, "-acl-enabled")
		}
		args = append(args, opts.ServerArgs...)
		s.proc = c.newProc(name, name, args, nil)
		// The pause-at-storage-call nemesis arms fault points here.
		s.faultPoints = filepath.Join(dataDir, name+"-fault-points")
		if err := os.WriteFile(s.faultPoints, nil, 0o600); err != nil {
			t.Fatalf("netns: %v", err)
		}
		s.proc.env = []string{faultpoint.Env + "=" + s.faultPoints}
	}
	deadline := time.Now().Add(opts.StartTimeout)
	for _, name := range c.names {
		if err := c.servers[name].proc.start(); err != nil {
			t.Fatalf("netns: %v", err)
		}
	}
	if err := nsPoll(time.Until(deadline), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if l := c.Leader(ctx); l == "" {
			return errors.New("no leader known to a majority of servers")
		}
		return nil
	}); err != nil {
		t.Fatalf("netns: cluster did not form: %v%s", err, c.tails())
	}
	if !opts.Insecure {
		if err := c.bootstrapACL(time.Until(deadline)); err != nil {
			t.Fatalf("netns: ACL bootstrap: %v%s", err, c.tails())
		}
	}

	// Every plugin before any agent: an agent registers its node with the
	// fingerprints of its first probe, and the controller plugin publishes
	// only to node plugins that registered under the shared root.
	servers := make([]string, len(c.names))
	for i, name := range c.names {
		servers[i] = c.servers[name].addr
	}
	for i, name := range workerNames {
		c.workers = append(c.workers, c.newWorker(name, hostdir.ModeNode, sockDir, dataDir, nsRotate(servers, i)))
	}
	c.ctrl = c.newWorker(nsControllerHost, hostdir.ModeController, sockDir, dataDir, nsRotate(servers, len(workerNames)))
	all := append(append([]*nsWorker(nil), c.workers...), c.ctrl)
	for _, w := range all {
		if err := w.plugin.start(); err != nil {
			t.Fatalf("netns: %v", err)
		}
	}
	for _, w := range all {
		if err := nsWaitSocket(w.socket, time.Until(deadline)); err != nil {
			t.Fatalf("netns: plugin of %s: %v%s", w.name, err, c.tails())
		}
		if err := w.agent.start(); err != nil {
			t.Fatalf("netns: %v", err)
		}
	}
	for _, w := range all {
		id, err := nsNodeID(w.agent.logPath, time.Until(deadline))
		if err != nil {
			t.Fatalf("netns: agent of %s: %v%s", w.name, err, c.tails())
		}
		w.nodeID = id
	}
	if err := nsPoll(time.Until(deadline), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		leader := c.Leader(ctx)
		if leader == "" {
			return errors.New("no leader")
		}
		var out structs.PluginResponse // see leaderViews for why not api.Client.Plugin
		if err := c.control(leader).Call(ctx, "Plugin.Get", &structs.PluginSpecificRequest{ID: nsPluginID}, &out); err != nil {
			return err
		}
		p := out.Plugin
		if p == nil {
			return fmt.Errorf("plugin %s not registered yet", nsPluginID)
		}
		if p.Controllers[c.ctrl.nodeID] != nil && !p.ControllerAdmitted(c.ctrl.nodeID) && p.ControllersPending > 0 {
			// With ACLs on the controller node's client certificate does
			// not admit its controller (issue 38): the operator does,
			// with the management token.
			var adm structs.PluginAdmissionResponse
			return errors.Join(fmt.Errorf("controller on %s pending admission", c.ctrl.nodeID),
				c.control(leader).Call(ctx, "Plugin.AdmitController",
					&structs.PluginAdmissionRequest{PluginID: nsPluginID, NodeID: c.ctrl.nodeID}, &adm))
		}
		if p.NodesHealthy != len(c.workers) || p.ControllersHealthy != 1 {
			return fmt.Errorf("plugin %s exp: %d healthy nodes and 1 healthy controller got: %d and %d",
				nsPluginID, len(c.workers), p.NodesHealthy, p.ControllersHealthy)
		}
		return nil
	}); err != nil {
		t.Fatalf("netns: nodes did not register: %v%s", err, c.tails())
	}
	var desc []string
	for _, w := range all {
		desc = append(desc, w.name+"="+w.nodeID)
	}
	t.Logf("netns: cluster up (servers %s, proxies %v, mutual TLS and ACLs %v): nodes %s; logs in %s",
		strings.Join(servers, ","), !opts.DirectPeers, !opts.Insecure, strings.Join(desc, " "), c.logDir)
	return c
}

// serverFlagsSupported returns the optional server flags the binary has.
func (c *netnsCluster) serverFlagsSupported() []string {
	out, _ := exec.Command(c.bin, "agent", "-help").CombinedOutput()
	help := string(out)
	var args []string
	var missing []string
	for _, f := range nsServerFlags(c.opts) {
		if strings.Contains(help, "  "+f[0]+" ") || strings.Contains(help, "  "+f[0]+"\n") {
			args = append(args, f[0], f[1])
		} else {
			missing = append(missing, f[0])
		}
	}
	if len(missing) > 0 {
		c.t.Logf("netns: claimd has no %s; servers run with its defaults", strings.Join(missing, ", "))
	}
	return args
}

func nsRotate(s []string, n int) []string {
	n %= len(s)
	return append(append([]string(nil), s[n:]...), s[:n]...)
}

// newWorker prepares (does not start) a client node: its plugin in mode and
// its agent, both in host's namespace.
func (c *netnsCluster) newWorker(host string, mode hostdir.Mode, sockDir, dataDir string, servers []string) *nsWorker {
	w := &nsWorker{
		name:    host,
		socket:  filepath.Join(sockDir, host+".sock"),
		audit:   filepath.Join(c.logDir, host+"-plugin-audit.jsonl"),
		control: filepath.Join(dataDir, host+"-plugin-control.json"),
	}
	pargs := []string{"csi-plugin", "hostdir", "-endpoint", "unix://" + w.socket, "-root", c.root,
		"-mode", string(mode), "-audit-log", w.audit, "-control-file", w.control,
		"-auto-create", "-mount", "symlink", "-log-level", c.opts.LogLevel}
	typ := "controller"
	if mode == hostdir.ModeNode {
		pargs = append(pargs, "-node-id", "ext-"+host)
		typ = "node"
	}
	// A plugin told to exit through its control file exits with
	// ExitCodeControl: a fault the workload asked for, not a crash.
	w.plugin = c.newProc(host+"-plugin", host, pargs, func(code int) bool { return code == hostdir.ExitCodeControl })
	aargs := []string{"agent", "-client", "-servers", strings.Join(servers, ","),
		"-data-dir", filepath.Join(dataDir, host), "-node-name", host,
		"-csi-plugin", "id=" + nsPluginID + ",type=" + typ + ",socket=unix://" + w.socket,
		"-log-level", c.opts.LogLevel}
	if c.opts.LogJSON {
		aargs = append(aargs, "-log-json")
	}
	aargs = append(aargs, c.opts.WorkerArgs[host]...)
	// A client certificate of its own is all the agent needs to register
	// its new node (no token), through whichever server it reaches first;
	// after that the node's secret authenticates it.
	aargs = append(aargs, c.tlsArgs(tlsutil.RoleClient, "client-"+host)...)
	w.agent = c.newProc(host+"-agent", host, aargs, nil)
	return w
}

// shutdown stops everything at test end; on failure the logs are kept.
func (c *netnsCluster) shutdown() {
	c.mu.Lock()
	c.stopping = true
	procs := append([]*nsProc(nil), c.allProcs...)
	clients := append([]*api.Client(nil), c.clients...)
	for _, cl := range c.ctl {
		clients = append(clients, cl)
	}
	proxies := c.proxies
	c.mu.Unlock()

	if c.t.Failed() {
		if dir, err := os.MkdirTemp("", "claimd-netns-logs-"); err == nil {
			if err := c.SaveLogs(dir); err == nil {
				c.t.Logf("netns: logs of the failed test saved in %s", dir)
			}
		}
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			if err := p.kill(); err != nil {
				c.t.Logf("netns: cleanup: %v", err)
			}
		})
	}
	wg.Wait()
	for _, cl := range clients {
		_ = cl.Close()
	}
	for name, p := range proxies {
		if err := p.Close(); err != nil {
			c.t.Logf("netns: cleanup: proxy of %s: %v", name, err)
		}
	}
}

// Servers implements Cluster.
func (c *netnsCluster) Servers() []string { return append([]string(nil), c.names...) }

func (c *netnsCluster) server(name string) (*nsServer, error) {
	s, ok := c.servers[name]
	if !ok {
		return nil, fmt.Errorf("netns: unknown server %q (have %v)", name, c.names)
	}
	return s, nil
}

func (c *netnsCluster) worker(name string) (*nsWorker, error) {
	for _, w := range c.workers {
		if w.name == name {
			return w, nil
		}
	}
	return nil, fmt.Errorf("netns: unknown worker %q", name)
}

// Client implements Cluster: a new client on every call (the caller closes
// it; the backend also closes every one at test end), dialling the
// server's direct address from the workload namespace, with the cli
// certificate and the management token (the operator's client). Each
// caller gets its own session, so one caller's dial to an unreachable
// server never holds up another's calls. It panics on an unknown server, a
// bug in the caller.
func (c *netnsCluster) Client(server string) *api.Client {
	cfg := c.apiConfig(server, 30*time.Second)
	cfg.TokenFunc = c.managementToken
	return c.keepClient(server, cfg)
}

// WorkloadClient implements Cluster: as Client, but with the workload's
// token (nsWorkloadPolicy) instead of the management token.
func (c *netnsCluster) WorkloadClient(server string) *api.Client {
	cfg := c.apiConfig(server, 30*time.Second)
	c.mu.Lock()
	cfg.Token = c.workToken
	c.mu.Unlock()
	return c.keepClient(server, cfg)
}

// apiConfig is an api client configuration for a server's direct address,
// dialled from the workload namespace, with the cli certificate unless
// the cluster is insecure, and no token.
func (c *netnsCluster) apiConfig(server string, timeout time.Duration) api.Config {
	s, err := c.server(server)
	if err != nil {
		panic(err.Error())
	}
	return api.Config{Addresses: []string{s.addr}, Timeout: timeout, Dialer: c.lab.Dialer(nsWorkloadHost), TLS: c.cliTLS}
}

// managementToken is the management token, "" before the bootstrap.
func (c *netnsCluster) managementToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mgmtToken
}

// keepClient makes a client that the backend closes at test end.
func (c *netnsCluster) keepClient(server string, cfg api.Config) *api.Client {
	cl, err := api.NewClient(cfg)
	if err != nil {
		panic(fmt.Sprintf("netns: api client for %s: %v", server, err))
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl
}

// control is the backend's own client for a server, one per server: short
// timeouts and no no_leader retries, so probes such as Leader never wait
// long. It sends the management token once there is one.
func (c *netnsCluster) control(server string) *api.Client {
	cfg := c.apiConfig(server, 10*time.Second)
	cfg.RetryNoLeaderFor = -1
	cfg.TokenFunc = c.managementToken
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.ctl[server]; ok {
		return cl
	}
	cl, err := api.NewClient(cfg)
	if err != nil {
		panic(fmt.Sprintf("netns: api client for %s: %v", server, err))
	}
	c.ctl[server] = cl
	return cl
}

// Workers implements Cluster.
func (c *netnsCluster) Workers() []Worker {
	out := make([]Worker, len(c.workers))
	for i, w := range c.workers {
		out[i] = Worker{Name: w.name, NodeID: w.nodeID, NodeAudit: w.audit}
	}
	return out
}

// ControllerAudit implements Cluster.
func (c *netnsCluster) ControllerAudit() string { return c.ctrl.audit }

func (c *netnsCluster) StorageRoot() string { return c.root }

// leaderViews asks every server, in parallel and from the workload
// namespace, whom it believes leads; a server that does not answer within
// the context (or 1 s) maps to "?", one that knows no leader to "".
func (c *netnsCluster) leaderViews(ctx context.Context) map[string]string {
	views := make([]string, len(c.names))
	var wg sync.WaitGroup
	for i, name := range c.names {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			// Call, not api.Client.Leader, and a reply read only on
			// success: after a timeout rpc.MuxClient.Call returns while a
			// late answer may still be decoded into the reply (a data race
			// the api wrappers expose by returning the reply regardless).
			var addr string
			err := c.control(name).Call(cctx, "Status.Leader", &structs.EmptyArgs{}, &addr)
			switch {
			case err != nil:
				views[i] = "?"
			case addr == "":
				views[i] = ""
			default:
				if n, ok := c.byAddr[addr]; ok {
					views[i] = n
				} else {
					views[i] = "?" + addr
				}
			}
		})
	}
	wg.Wait()
	out := make(map[string]string, len(c.names))
	for i, name := range c.names {
		out[name] = views[i]
	}
	return out
}

// Leader implements Cluster: the server a majority of servers name as
// leader, or "" when no majority agrees (during an election, or while a
// majority is down or unreachable from the workload namespace). An
// isolated old leader that still believes it leads is outvoted.
func (c *netnsCluster) Leader(ctx context.Context) string {
	votes := map[string]int{}
	for _, v := range c.leaderViews(ctx) {
		if v != "" && !strings.HasPrefix(v, "?") {
			votes[v]++
		}
	}
	for name, n := range votes {
		if n > len(c.names)/2 {
			return name
		}
	}
	return ""
}

// Isolate implements Cluster: the server is cut off from every other host
// (servers, client nodes and the workload), both ways.
func (c *netnsCluster) Isolate(server string) error {
	if _, err := c.server(server); err != nil {
		return err
	}
	return c.lab.Isolate(server)
}

// Bridge implements Cluster.
func (c *netnsCluster) Bridge(a, b, cc string) error {
	for _, n := range []string{a, b, cc} {
		if _, err := c.server(n); err != nil {
			return err
		}
	}
	return c.lab.Bridge(a, b, cc)
}

// DropSYN implements Cluster: from can open no new connection to to.
func (c *netnsCluster) DropSYN(from, to string) error {
	for _, n := range []string{from, to} {
		if _, err := c.server(n); err != nil {
			return err
		}
	}
	return c.lab.DropSYN(from, to)
}

// IsolateWorker implements Cluster: the worker's host (agent and plugin)
// is partitioned from every server; the other client nodes and the
// workload are unaffected.
func (c *netnsCluster) IsolateWorker(worker string) error {
	w, err := c.worker(worker)
	if err != nil {
		return err
	}
	for _, s := range c.names {
		if err := c.lab.Partition(w.name, s); err != nil {
			return err
		}
	}
	return nil
}

// SetLatency implements Cluster: every server↔server connection crosses
// one proxy, which now holds each chunk d (plus up to d/10 jitter) in each
// direction.
func (c *netnsCluster) SetLatency(d time.Duration) error {
	if c.opts.DirectPeers {
		if d == 0 {
			return nil
		}
		return errors.New("netns: SetLatency needs the latency proxies (NetnsOptions.DirectPeers is set)")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.proxies {
		p.SetDelay(d, d/10)
	}
	if d != c.latency {
		c.t.Logf("netns: server↔server latency %s → %s", c.latency, d)
	}
	c.latency = d
	return nil
}

// Heal implements Cluster: removes every network fault and the latency.
// Process faults (killed, paused) stay as they are.
func (c *netnsCluster) Heal() error {
	err := c.lab.Heal()
	return errors.Join(err, c.SetLatency(0))
}

// Kill implements Cluster: SIGKILL, returning once the process is reaped.
func (c *netnsCluster) Kill(server string) error {
	s, err := c.server(server)
	if err != nil {
		return err
	}
	c.t.Logf("netns: kill -9 %s", server)
	return s.proc.kill()
}

// Restart implements Cluster: starts a server that is not running on its
// data dir with its original flags, and returns once it listens. A server
// that is running (even paused) is left alone.
func (c *netnsCluster) Restart(server string) error {
	s, err := c.server(server)
	if err != nil {
		return err
	}
	c.t.Logf("netns: restart %s", server)
	if err := s.proc.start(); err != nil {
		return err
	}
	// Dial from the server's own namespace: local traffic, so no network
	// fault in force can make a listening server look down.
	dial := c.lab.Dialer(server)
	return nsPoll(nsStartWait, func() error {
		if s.proc.exited() {
			return fmt.Errorf("netns: %s exited after restart%s", server, nsTail(s.proc.logPath, 20))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := dial(ctx, s.addr)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// Pause implements Cluster: SIGSTOP, returning once the kernel shows the
// process stopped.
func (c *netnsCluster) Pause(server string) error {
	s, err := c.server(server)
	if err != nil {
		return err
	}
	c.t.Logf("netns: SIGSTOP %s", server)
	return s.proc.pause()
}

// storageCallPoints are the fault points of a leader's storage calls
// (attachment.Manager.call): it stops after deciding one, before its lease
// is checked.
var storageCallPoints = []string{
	"storage-call:ClientCSI.ControllerAttachVolume",
	"storage-call:ClientCSI.ControllerDetachVolume",
	"storage-call:ClientCSI.NodeDetachVolume",
}

// PauseAtStorageCall implements storagePauser: the server stops itself
// (SIGSTOP) at its next storage call, if it makes one within wait. It
// reports whether it stopped there; either way no point stays armed, and
// Resume continues it.
func (c *netnsCluster) PauseAtStorageCall(server string, wait time.Duration) (bool, error) {
	s, err := c.server(server)
	if err != nil {
		return false, err
	}
	if err := os.WriteFile(s.faultPoints, []byte(strings.Join(storageCallPoints, "\n")+"\n"), 0o600); err != nil {
		return false, err
	}
	s.proc.mu.Lock()
	pid := 0
	if s.proc.running() {
		pid = s.proc.cmd.Process.Pid
	}
	s.proc.mu.Unlock()
	stopped := func() bool { st := nsProcState(pid); return st == 'T' || st == 't' }
	_ = nsPoll(wait, func() error {
		if pid == 0 || stopped() {
			return nil
		}
		return errors.New("no storage call yet")
	})
	// Disarm, then look once more: a stop may have raced the disarming.
	err = os.WriteFile(s.faultPoints, nil, 0o600)
	if pid == 0 || !stopped() {
		return false, err
	}
	s.proc.mu.Lock()
	s.proc.paused = true
	s.proc.mu.Unlock()
	c.t.Logf("netns: %s stopped itself at a storage call", server)
	return true, err
}

// Resume implements Cluster: SIGCONT to a paused server (no-op otherwise).
func (c *netnsCluster) Resume(server string) error {
	s, err := c.server(server)
	if err != nil {
		return err
	}
	c.t.Logf("netns: SIGCONT %s", server)
	return s.proc.resume()
}

// KillPlugin implements Cluster: SIGKILL of the worker's node plugin. Its
// socket file stays, as after a real crash; its mounts stay too.
func (c *netnsCluster) KillPlugin(worker string) error {
	w, err := c.worker(worker)
	if err != nil {
		return err
	}
	c.t.Logf("netns: kill -9 node plugin of %s", worker)
	return w.plugin.kill()
}

// RestartPlugin implements Cluster: starts the worker's node plugin again
// (same socket, root and audit log) and returns once its socket accepts.
// The agent notices on its next probe (up to 5 s).
func (c *netnsCluster) RestartPlugin(worker string) error {
	w, err := c.worker(worker)
	if err != nil {
		return err
	}
	c.t.Logf("netns: restart node plugin of %s", worker)
	if err := w.plugin.start(); err != nil {
		return err
	}
	return nsWaitSocket(w.socket, nsStartWait)
}

// Digest implements Cluster. It retries, within ctx and at most 200 times,
// when the backend's session to the server broke (a restarted server's old
// connection fails once).
func (c *netnsCluster) Digest(ctx context.Context, server string) (*structs.StateDigest, error) {
	if _, err := c.server(server); err != nil {
		return nil, err
	}
	cl := c.control(server)
	wait := 5 * time.Millisecond
	var last error
	for range 200 {
		// A fresh reply each time, read only on success: see leaderViews.
		d := new(structs.StateDigest)
		err := cl.Call(ctx, "Status.StateDigest", &structs.EmptyArgs{}, d)
		switch {
		case err == nil:
			return d, nil
		case errors.Is(err, rpc.ErrTransport) && ctx.Err() == nil:
			last = err
		default:
			return nil, fmt.Errorf("netns: digest of %s: %w", server, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("netns: digest of %s: %w (last: %v)", server, ctx.Err(), last)
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
	return nil, fmt.Errorf("netns: digest of %s: 200 attempts: %w", server, last)
}

// nsCrash matches what a crashing Go process prints, at the start of a
// line (log lines start with a timestamp or "{").
var nsCrash = regexp.MustCompile(`^(panic: |fatal error: |WARNING: DATA RACE)`)

// Health implements Cluster: no process exited unless it was killed, and
// no log file shows a panic, a fatal runtime error or a data race, and no
// running server holds more than nsGoroutineBound goroutines (from
// Status.Runtime; a leak grows with every fault, a healthy server stays in
// the hundreds).
func (c *netnsCluster) Health() error {
	c.mu.Lock()
	procs := append([]*nsProc(nil), c.allProcs...)
	c.mu.Unlock()
	var errs []error
	for _, p := range procs {
		for _, e := range p.unexpectedExits() {
			errs = append(errs, errors.New(e))
		}
		if e := nsScanCrash(p.logPath); e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.name, e))
		}
	}
	for _, name := range c.Servers() {
		cl := c.Client(name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cl.Runtime(ctx)
		cancel()
		cl.Close()
		if err != nil {
			continue // a dead process is reported above, by its exit
		}
		if st.Goroutines > nsGoroutineBound {
			errs = append(errs, fmt.Errorf("%s: %d goroutines, bound %d (a leak?)", name, st.Goroutines, nsGoroutineBound))
		}
	}
	return errors.Join(errs...)
}

// nsGoroutineBound: a server serving three peers, a few agents and the
// workload's sessions runs a few hundred goroutines.
const nsGoroutineBound = 3000

// nsScanCrash returns the first crash report in a log file with the lines
// that follow it (the panic value and the first stack frames).
func nsScanCrash(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		if !nsCrash.MatchString(sc.Text()) {
			continue
		}
		evidence := []string{sc.Text()}
		for i := 0; i < 12 && sc.Scan(); i++ {
			evidence = append(evidence, sc.Text())
		}
		return fmt.Errorf("%s:%d:\n%s", path, line, strings.Join(evidence, "\n"))
	}
	return sc.Err()
}

// SaveLogs implements Cluster: every process's log (all its starts, one
// after the other with a marker line), every plugin's audit log, and
// cluster.txt describing hosts, addresses, node IDs and pids.
func (c *netnsCluster) SaveLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(c.logDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		errs = append(errs, copyFile(filepath.Join(c.logDir, e.Name()), filepath.Join(dir, e.Name())))
	}
	errs = append(errs, os.WriteFile(filepath.Join(dir, "cluster.txt"), []byte(c.describe()), 0o644))
	return errors.Join(errs...)
}

func (c *netnsCluster) describe() string {
	var b strings.Builder
	for _, h := range c.lab.Hosts() {
		fmt.Fprintf(&b, "host %-8s %s netns %s\n", h, c.lab.Addr(h), c.lab.Namespace(h))
	}
	for _, name := range c.names {
		s := c.servers[name]
		fmt.Fprintf(&b, "server %s bind %s advertise %s\n", name, s.addr, s.peerAddr)
	}
	for _, w := range append(append([]*nsWorker(nil), c.workers...), c.ctrl) {
		if w != nil {
			fmt.Fprintf(&b, "node %s id %s socket %s\n", w.name, w.nodeID, w.socket)
		}
	}
	c.mu.Lock()
	procs := append([]*nsProc(nil), c.allProcs...)
	c.mu.Unlock()
	for _, p := range procs {
		fmt.Fprintf(&b, "process %s pids %v: %s\n", p.name, p.pidList(), strings.Join(p.args, " "))
	}
	return b.String()
}

// tails is the end of every server's log, for a start-up failure message.
func (c *netnsCluster) tails() string {
	var b strings.Builder
	for _, name := range c.names {
		if s := c.servers[name]; s.proc != nil {
			b.WriteString(nsTail(s.proc.logPath, 15))
		}
	}
	return b.String()
}

// nsTail is the last n lines of a file, headed by its path.
func nsTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\n--- " + path + " (tail) ---\n" + strings.Join(lines, "\n")
}

// nsPoll calls fn until it returns nil or timeout passes, returning fn's
// last error then. Waits are short at first and capped at 100 ms.
func nsPoll(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	delay := 5 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// nsWaitSocket waits until a unix socket accepts a connection.
func nsWaitSocket(path string, timeout time.Duration) error {
	return nsPoll(timeout, func() error {
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

var nsClientRunning = regexp.MustCompile(`claimd client running: node=(\S+)`)

// nsNodeID reads the node ID an agent prints once it runs.
func nsNodeID(logPath string, timeout time.Duration) (string, error) {
	var id string
	err := nsPoll(timeout, func() error {
		data, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		m := nsClientRunning.FindSubmatch(data)
		if m == nil {
			return fmt.Errorf("no %q line in %s yet", "claimd client running", logPath)
		}
		id = string(m[1])
		return nil
	})
	return id, err
}

// nsProc is one claimd process slot: a name, a host, fixed arguments and a
// log file that every start appends to. It is safe for concurrent use.
type nsProc struct {
	c       *netnsCluster
	name    string
	host    string
	args    []string
	logPath string
	// allowExit says whether an exit status is expected even when the
	// process was not killed (nil: none is).
	allowExit func(code int) bool

	mu         sync.Mutex
	env        []string // added to the environment
	cmd        *exec.Cmd
	done       chan struct{} // closed when cmd is reaped
	want       bool          // started and not killed by the backend
	paused     bool
	pids       []int
	unexpected []string
}

func (c *netnsCluster) newProc(name, host string, args []string, allowExit func(int) bool) *nsProc {
	p := &nsProc{c: c, name: name, host: host, args: args, allowExit: allowExit,
		logPath: filepath.Join(c.logDir, name+".log")}
	c.mu.Lock()
	c.allProcs = append(c.allProcs, p)
	c.mu.Unlock()
	return p
}

func (p *nsProc) running() bool {
	return p.cmd != nil && !nsClosed(p.done)
}

func nsClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *nsProc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.running()
}

// start runs the process unless it is running. Its output is appended to
// the log file after a marker line.
func (p *nsProc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running() {
		return nil
	}
	p.c.mu.Lock()
	stopping := p.c.stopping
	p.c.mu.Unlock()
	if stopping {
		return fmt.Errorf("netns: not starting %s: the test is ending", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child holds its own descriptor
	fmt.Fprintf(f, "=== netns: start %d of %s in %s at %s\n", len(p.pids)+1, p.name, p.host, time.Now().Format(time.RFC3339Nano))
	cmd := p.c.lab.Exec(p.host, p.c.bin, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("netns: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.want, p.paused = cmd, done, true, false
	p.pids = append(p.pids, cmd.Process.Pid)
	go p.reap(cmd, done)
	return nil
}

// reap waits for the process and records an exit nobody asked for. It ends
// when the process does; the backend kills every process at test end.
func (p *nsProc) reap(cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	p.mu.Lock()
	if p.cmd == cmd && p.want {
		p.want = false
		code := cmd.ProcessState.ExitCode()
		if p.allowExit == nil || !p.allowExit(code) {
			p.unexpected = append(p.unexpected, fmt.Sprintf("%s (pid %d) exited without being killed at %s: %v; log %s",
				p.name, cmd.Process.Pid, time.Now().Format(time.RFC3339Nano), err, p.logPath))
		}
	}
	p.mu.Unlock()
	close(done)
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *nsProc) kill() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	running := p.running()
	p.want, p.paused = false, false
	p.mu.Unlock()
	if !running {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGKILL) // fails only when already gone
	select {
	case <-done:
		return nil
	case <-time.After(nsStopWait):
		return fmt.Errorf("netns: %s (pid %d) not reaped %s after SIGKILL", p.name, cmd.Process.Pid, nsStopWait)
	}
}

// pause sends SIGSTOP and waits until /proc shows the process stopped.
func (p *nsProc) pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() {
		return fmt.Errorf("netns: cannot pause %s: not running", p.name)
	}
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("netns: SIGSTOP %s: %w", p.name, err)
	}
	p.paused = true
	return nsPoll(nsStopWait, func() error {
		if st := nsProcState(pid); st != 'T' && st != 't' {
			return fmt.Errorf("netns: %s (pid %d) state exp: T (stopped) got: %q", p.name, pid, st)
		}
		return nil
	})
}

// resume sends SIGCONT to a paused process and waits until it runs.
func (p *nsProc) resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() || !p.paused {
		return nil
	}
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("netns: SIGCONT %s: %w", p.name, err)
	}
	p.paused = false
	return nsPoll(nsStopWait, func() error {
		if st := nsProcState(pid); st == 'T' || st == 't' {
			return fmt.Errorf("netns: %s (pid %d) still stopped after SIGCONT", p.name, pid)
		}
		return nil
	})
}

// nsProcState is the state letter in /proc/PID/stat (R, S, D, T, Z, …), or
// 0 when it cannot be read.
func nsProcState(pid int) byte {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// "pid (comm) S …": comm may contain spaces and parentheses.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

func (p *nsProc) unexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unexpected...)
}

func (p *nsProc) pidList() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.pids...)
}
