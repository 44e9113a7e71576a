package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/claimd/claimd/leaderlease"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/httpapi"
	"github.com/claimd/claimd/raftnode"
	"github.com/claimd/claimd/reconcile"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/tlsutil"
	"github.com/claimd/claimd/watcher"
)

type agentFlags struct {
	server          bool
	client          bool
	dev             bool
	bootstrapExpect int
	join            string
	dataDir         string
	bind            string
	advertise       string
	nodeName        string
	logLevel        string
	logJSON         bool
	raftMultiplier  float64
	raftLogStore    string
	leaveOnTerm     bool
	servers         string
	plugins         pluginFlags
	heartbeatTTL    time.Duration
	storageLease    time.Duration
	claimGCInterval time.Duration
	reconcileEvery  time.Duration
	releaseWorkers  int
	backoffBase     time.Duration
	backoffMax      time.Duration
	probeInterval   time.Duration
	nodeLease       time.Duration
	fenceCommand    string
	fenceTimeout    time.Duration
	ownDetach       time.Duration
	clockRate       float64
	debugAddr       string
	httpAddr        string
	httpHosts       string // -http-allowed-hosts, comma-separated
	tls             tlsutil.Config
	tlsAllowPlain   bool
	tlsHandshake    time.Duration
	aclEnabled      bool
	apCleanupDead   bool // -autopilot-cleanup-dead-servers
	aclToken        string
	devInsecure     bool
	// Telemetry (files only for now: the telemetry block).
	promRetention   time.Duration
	disableHostname bool
}

// pluginFlags collects repeated -csi-plugin id=ID,type=TYPE,socket=PATH.
type pluginFlags []csi.PluginConfig

func (p *pluginFlags) String() string { return fmt.Sprint(len(*p), " plugins") }

func (p *pluginFlags) Set(s string) error {
	pc, err := csi.ParsePluginConfig(s)
	if err != nil {
		return err
	}
	*p = append(*p, pc)
	return nil
}

// Agent defaults that no other package owns.
const (
	defaultLogLevel       = "info"
	defaultRaftMultiplier = 1
	// defaultNodeLease is three default heartbeat TTLs: a node is marked
	// down after one, so a lease only matters for a node that stays away.
	defaultNodeLease = 30 * time.Second
	// devControllerCalls is the built-in hostdir's controller_calls: more
	// than the default release workers, so it never holds a release back.
	devControllerCalls = 64
	// leaveTimeout bounds -leave-on-terminate's leave.
	leaveTimeout = 30 * time.Second
	// devBootstrapTimeout bounds the dev agent's wait for its server to
	// lead and make the management token.
	devBootstrapTimeout = time.Minute
)

// runAgent is `claimd agent`: read the flags and files, start what they
// ask for (startAgent), run until SIGINT or SIGTERM (SIGHUP reloads), then
// stop it all in reverse order.
func runAgent(args []string, stdout, stderr io.Writer) int {
	x := newCmd("agent", stdout, stderr)
	var f agentFlags
	configs := defineAgentFlags(x.fs, &f)
	if _, ok := x.parse(args, noArguments); !ok {
		return 1
	}
	configFiles, err := loadAgentConfig(x.fs, &f, *configs)
	if err != nil {
		return x.fail("%v", err)
	}
	logger, err := newAgentLogger(&f, stderr)
	if err != nil {
		return x.fail("%v", err)
	}
	a := &agent{f: f, logger: logger, stdout: stdout}
	defer a.stop()
	if err := a.start(); err != nil {
		return x.fail("%v", err)
	}
	a.runUntilSignal(configFiles)
	return 0
}

// defineAgentFlags binds the agent's flags to f and returns the -config
// paths. Defaults come from the packages that own them.
func defineAgentFlags(fs *flag.FlagSet, f *agentFlags) *configPaths {
	// Gauges without the host name in their key: Prometheus labels the
	// instance itself (telemetry { disable_hostname = false } restores it).
	f.disableHostname = true
	var configs configPaths
	fs.Var(&configs, "config", "an HCL or JSON configuration file, or a directory of *.hcl and *.json files (repeatable; later files override earlier ones, flags override files)")
	fs.BoolVar(&f.server, "server", false, "run a server (Raft member)")
	fs.BoolVar(&f.client, "client", false, "run a client agent (with -servers and -csi-plugin)")
	fs.StringVar(&f.servers, "servers", "", "client: server addresses, comma-separated")
	fs.Var(&f.plugins, "csi-plugin", "client: a CSI plugin, id=ID,type=node|controller|monolith,socket=PATH[,controller_calls=N] (repeatable)")
	fs.BoolVar(&f.dev, "dev", false, "run a single-server cluster with state in a temporary directory (mutual TLS and ACLs on, with its own CA and management token)")
	fs.BoolVar(&f.devInsecure, "dev-insecure", false, "with -dev: plaintext and no ACLs (for trying the plaintext path only)")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "bootstrap once this many servers know each other")
	fs.StringVar(&f.join, "join", "", "addresses of other servers, comma-separated")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for the server ID, Raft log and snapshots")
	fs.StringVar(&f.bind, "bind", api.DefaultAddress, "the one RPC/Raft address, host:port")
	fs.StringVar(&f.advertise, "advertise", "", "address other servers dial (default: -bind)")
	fs.StringVar(&f.nodeName, "node-name", "", "node name (default: the host name; for a server with the start of its ID, unique per data dir)")
	fs.StringVar(&f.logLevel, "log-level", defaultLogLevel, "trace, debug, info, warn or error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines")
	fs.Float64Var(&f.raftMultiplier, "raft-multiplier", defaultRaftMultiplier, "scale Raft timeouts (1 = production; tests use less)")
	fs.StringVar(&f.raftLogStore, "raft-log-store", "", "server: the Raft log store, boltdb or wal (default: what the data dir holds, else "+raftnode.DefaultLogStore+"); a data dir keeps the kind it was made with")
	fs.DurationVar(&f.heartbeatTTL, "heartbeat-ttl", server.DefaultHeartbeatTTL, "server: how soon client nodes must heartbeat before they are marked down")
	fs.DurationVar(&f.storageLease, "storage-lease", leaderlease.Default, "server: the longest one storage call (publish, detach, ...) may take, and how long a new leader waits before its first (decision 46)")
	fs.DurationVar(&f.claimGCInterval, "claim-gc-interval", watcher.DefaultGCInterval, "server: how often the claim GC looks for past claims without an eval")
	fs.DurationVar(&f.reconcileEvery, "reconcile-interval", reconcile.DefaultInterval, "server: how often the leader compares each plugin's storage (ListVolumes) with claimd's record; negative: only on demand (claimd volume reconcile)")
	fs.IntVar(&f.releaseWorkers, "release-workers", watcher.DefaultWorkers, "server: volumes released in parallel by the leader")
	fs.DurationVar(&f.backoffBase, "release-backoff-base", watcher.DefaultBackoffBase, "server: first retry delay of a failed release (doubles each attempt)")
	fs.DurationVar(&f.backoffMax, "release-backoff-max", watcher.DefaultBackoffMax, "server: longest retry delay of a failed release")
	fs.DurationVar(&f.probeInterval, "plugin-probe-interval", csi.DefaultProbeInterval, "client: how often CSI plugins are health-probed")
	fs.DurationVar(&f.nodeLease, "node-lease", defaultNodeLease, "client: this node's lease; before it runs out unrenewed the node fences its fence-policy volumes (0: no lease, they wait like wait-policy ones)")
	fs.StringVar(&f.fenceCommand, "fence-command", "", "client: shell command run before a fence unmounts a volume, to stop what writes through it (env CLAIMD_ALLOC_ID, CLAIMD_VOLUME_ID, CLAIMD_MOUNT_PATH, CLAIMD_NODE_ID)")
	fs.DurationVar(&f.fenceTimeout, "fence-timeout", 0, "client: the longest one run of -fence-command may take; its whole process group is killed then (0: half the fence budget, which is a quarter of -node-lease, at most 10s; must be below the budget)")
	fs.DurationVar(&f.ownDetach, "own-detach-timeout", client.DefaultOwnDetachTimeout, "client: how long this agent's own unmount of a stopping allocation's volume may take, retries included; past it the stop is reported without that volume and the servers' node detach does it (decision 61)")
	fs.Float64Var(&f.clockRate, "clock-rate", 1, "testing only: run this client's lease clock at this rate of real time (0.5-2)")
	fs.StringVar(&f.httpAddr, "http-addr", httpapi.DefaultAddr, "serve the HTTP API on this host:port (HTTPS with a client certificate when TLS is on; \"\" or off disables)")
	fs.StringVar(&f.httpHosts, "http-allowed-hosts", "", "over plain HTTP, names besides IP addresses, localhost and this machine's name the HTTP API may be addressed by (comma-separated; others are refused, against DNS rebinding)")
	fs.StringVar(&f.debugAddr, "debug-addr", "", "serve Go's pprof profiles on this host:port (loopback only, e.g. 127.0.0.1:6060)")
	fs.BoolVar(&f.leaveOnTerm, "leave-on-terminate", false, "leave the Raft configuration on SIGINT/SIGTERM instead of just stopping")
	fs.BoolVar(&f.apCleanupDead, "autopilot-cleanup-dead-servers", false, "server: the leader removes a server unreachable for 5 minutes from the Raft configuration, only while a quorum stays")
	fs.StringVar(&f.tls.CAFile, "tls-ca-file", "", "CA certificate (PEM); with -tls-cert-file and -tls-key-file turns mutual TLS on")
	fs.StringVar(&f.tls.CertFile, "tls-cert-file", "", "this agent's certificate (PEM): server.<region>.claimd or client.<region>.claimd")
	fs.StringVar(&f.tls.KeyFile, "tls-key-file", "", "the key of -tls-cert-file (PEM)")
	fs.BoolVar(&f.tls.VerifyServerHostname, "tls-verify-server-hostname", true, "require servers' certificates to name server.<region>.claimd")
	fs.StringVar(&f.tls.Region, "region", tlsutil.DefaultRegion, "region named in certificates")
	fs.DurationVar(&f.tlsHandshake, "tls-handshake-timeout", rpc.HandshakeTimeout, "server: how long an incoming connection may take over its TLS handshake and its first byte inside TLS, and the longest it may wait for its address's turn to start one; past it the connection is closed ("+server.MinTLSHandshakeTimeout.String()+" to "+server.MaxTLSHandshakeTimeout.String()+")")
	fs.BoolVar(&f.tlsAllowPlain, "tls-allow-plaintext", false, "migration mode: accept plaintext beside TLS while a cluster is switched (never leave it on)")
	fs.BoolVar(&f.aclEnabled, "acl-enabled", false, "server: check ACL tokens on every call")
	fs.StringVar(&f.aclToken, "acl-token", "", "client: a token that grants node:write, to register a new node when ACLs are on without TLS (default $CLAIMD_TOKEN)")
	return &configs
}

// newAgentLogger is the agent's root logger, on stderr.
func newAgentLogger(f *agentFlags, stderr io.Writer) (hclog.Logger, error) {
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("-log-level: %q is not one of trace, debug, info, warn, error", f.logLevel)
	}
	return hclog.New(&hclog.LoggerOptions{Name: "claimd", Level: level, JSONFormat: f.logJSON, Output: stderr}), nil
}

// agent is one running agent: its configuration (files and flags, and
// what -dev fills in), what it started, and how to stop each part.
type agent struct {
	f      agentFlags
	logger hclog.Logger
	stdout io.Writer
	stops  []func() // run in reverse order

	devSec  *devPKI // -dev with TLS and ACLs
	tls     *tlsutil.Configurator
	srv     *server.Server
	client  *client.Agent
	servers []string // the servers the client agent and the HTTP API call
}

// onStop registers a part's stop, run before those registered earlier.
func (a *agent) onStop(stop func()) { a.stops = append(a.stops, stop) }

func (a *agent) stop() {
	for i := len(a.stops) - 1; i >= 0; i-- {
		a.stops[i]()
	}
}

// start starts every part the configuration asks for, in order; an
// error says which failed (what started before it is stopped by stop).
func (a *agent) start() error {
	if a.f.dev {
		if err := a.setUpDev(); err != nil {
			return err
		}
	}
	if !a.f.server && !a.f.client {
		return errors.New("choose -server, -client or -dev")
	}
	if err := hostNames(splitList(a.f.httpHosts)); err != nil {
		return fmt.Errorf("-http-allowed-hosts: %w", err)
	}
	if err := a.startDebug(); err != nil {
		return fmt.Errorf("-debug-addr: %w", err)
	}
	if err := a.loadTLS(); err != nil {
		return err
	}
	if err := a.startServer(); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	if err := a.startClient(); err != nil {
		return fmt.Errorf("start client: %w", err)
	}
	if err := a.startHTTP(); err != nil {
		return fmt.Errorf("-http-addr: %w", err)
	}
	return a.bootstrapDev()
}

// setUpDev fills in what -dev means: one server and a client agent, state
// in a temporary directory unless -data-dir says otherwise, its own
// certificates and ACLs unless TLS is configured or -dev-insecure, and
// the built-in hostdir plugin in this process.
func (a *agent) setUpDev() error {
	f := &a.f
	f.server, f.client = true, true
	f.bootstrapExpect = 1
	if f.dataDir == "" {
		dir, err := os.MkdirTemp("", "claimd-dev-")
		if err != nil {
			return err
		}
		a.onStop(func() { removeDevDir(dir, a.stdout) })
		f.dataDir = dir
	}
	if f.nodeName == "" {
		f.nodeName = "dev"
	}
	if !f.devInsecure && !f.tls.Enabled() {
		var err error
		if a.devSec, err = newDevPKI(f.dataDir); err != nil {
			return fmt.Errorf("dev certificates: %w", err)
		}
		f.tls, f.aclEnabled = a.devSec.agentTLS(), true
	}
	plug, err := startDevPlugin(f.dataDir, f.nodeName, a.logger)
	if err != nil {
		return fmt.Errorf("start built-in plugin: %w", err)
	}
	a.onStop(plug.Stop)
	// hostdir's volumes are directories on this machine: its controller
	// takes any number of detaches at once (decision 57).
	f.plugins = append(f.plugins, csi.PluginConfig{ID: "hostdir", Type: csi.PluginTypeMonolith, Socket: plug.Endpoint(),
		ControllerCalls: devControllerCalls})
	fmt.Fprintf(a.stdout, "built-in hostdir plugin: socket=%s root=%s\n", plug.Endpoint(), filepath.Join(f.dataDir, "hostdir"))
	return nil
}

// startDebug serves pprof on -debug-addr, if set.
func (a *agent) startDebug() error {
	if a.f.debugAddr == "" {
		return nil
	}
	stop, err := serveDebug(a.f.debugAddr, a.logger)
	if err != nil {
		return err
	}
	a.onStop(stop)
	return nil
}

// loadTLS reads the TLS files, when TLS is configured.
func (a *agent) loadTLS() error {
	if !a.f.tls.Enabled() {
		if a.f.tlsAllowPlain {
			return errors.New("-tls-allow-plaintext needs -tls-ca-file, -tls-cert-file and -tls-key-file")
		}
		return nil
	}
	var err error
	a.tls, err = tlsutil.NewConfigurator(a.f.tls)
	return err
}

// startServer starts the server, with -server. It leaves the Raft
// configuration when stopped if -leave-on-terminate says so.
func (a *agent) startServer() error {
	if !a.f.server {
		return nil
	}
	srv, err := startServer(a.f, a.tls, a.logger)
	if err != nil {
		return err
	}
	a.srv = srv
	a.onStop(func() {
		var err error
		if a.f.leaveOnTerm {
			err = srv.Leave(leaveTimeout)
		} else {
			err = srv.Shutdown()
		}
		if err != nil && !errors.Is(err, os.ErrClosed) {
			a.logger.Error("server shutdown", "error", err)
		}
	})
	fmt.Fprintf(a.stdout, "claimd server running: id=%s addr=%s data-dir=%s\n", srv.ID(), srv.Addr(), a.f.dataDir)
	return nil
}

// startClient starts the client agent, with -client: on -servers, or on
// this agent's own server; in a data dir of its own beside a server's.
func (a *agent) startClient() error {
	a.servers = splitList(a.f.servers)
	if !a.f.client {
		return nil
	}
	if len(a.servers) == 0 && a.srv != nil {
		a.servers = []string{a.srv.Addr()}
	}
	dataDir := a.f.dataDir
	if a.f.server {
		dataDir = filepath.Join(a.f.dataDir, "client")
	}
	ca, err := client.New(client.Config{
		Servers: a.servers, DataDir: dataDir, NodeName: a.f.nodeName, Plugins: a.f.plugins, Logger: a.logger,
		ProbeInterval: a.f.probeInterval, TLS: a.tls, TLSAllowPlaintext: a.f.tlsAllowPlain,
		NodeLease: a.f.nodeLease, FenceCommand: a.f.fenceCommand, FenceTimeout: a.f.fenceTimeout, ClockRate: a.f.clockRate,
		OwnDetachTimeout: a.f.ownDetach,
		RegisterToken:    api.TokenFromEnv(a.f.aclToken),
	})
	if err != nil {
		return err
	}
	a.client = ca
	a.onStop(ca.Shutdown)
	fmt.Fprintf(a.stdout, "claimd client running: node=%s servers=%s\n", ca.NodeID(), strings.Join(a.servers, ","))
	return nil
}

// startHTTP serves the HTTP API unless -http-addr turns it off.
func (a *agent) startHTTP() error {
	if httpDisabled(a.f.httpAddr) {
		return nil
	}
	h, err := startHTTP(a.f, a.srv, a.client, a.servers, a.tls, a.logger)
	if err != nil {
		return err
	}
	a.onStop(func() { h.Shutdown() })
	fmt.Fprintf(a.stdout, "claimd HTTP API: %s\n", h.URL())
	return nil
}

// bootstrapDev makes the dev agent's management token, writes the CLI's
// environment to dev.env and says where it is.
func (a *agent) bootstrapDev() error {
	if a.devSec == nil || a.srv == nil {
		return nil
	}
	if _, err := a.devSec.bootstrap(a.srv.Addr(), devBootstrapTimeout); err != nil {
		return err
	}
	// Where the environment is, never the token itself: dev.env (mode
	// 0600) is the one place the secret is written.
	fmt.Fprintf(a.stdout, "dev agent: mutual TLS and ACLs are on. In another shell, for the CLI:\n  source %s\n"+
		"(it sets CLAIMD_ADDR, CLAIMD_CACERT, CLAIMD_CLIENT_CERT, CLAIMD_CLIENT_KEY and CLAIMD_TOKEN, the management token)\n",
		a.devSec.envFile)
	return nil
}

// runUntilSignal returns on SIGINT or SIGTERM. SIGHUP reloads the
// configuration files and the TLS files: existing connections (Raft among
// them) keep going; new ones use what was reloaded.
func (a *agent) runUntilSignal(files *agentConfigFiles) {
	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	for sig := range sigCh {
		if sig != syscall.SIGHUP {
			a.logger.Info("caught signal; stopping", "signal", sig.String())
			return
		}
		files.reload(reloadTargets{logger: a.logger, tls: a.tls, srv: a.srv})
	}
}

func startServer(f agentFlags, tlsConf *tlsutil.Configurator, logger hclog.Logger) (*server.Server, error) {
	// server.Config takes 0 as its default; an operator's 0 is a mistake.
	if err := server.ValidateTLSHandshakeTimeout("tls_handshake_timeout", f.tlsHandshake); err != nil {
		return nil, err
	}
	cfg := server.Config{
		NodeName:            f.nodeName,
		DataDir:             f.dataDir,
		BindAddr:            f.bind,
		AdvertiseAddr:       f.advertise,
		BootstrapExpect:     f.bootstrapExpect,
		Join:                splitList(f.join),
		RaftMultiplier:      f.raftMultiplier,
		RaftLogStore:        f.raftLogStore,
		HeartbeatTTL:        f.heartbeatTTL,
		StorageLease:        f.storageLease,
		ClaimGCInterval:     f.claimGCInterval,
		ReconcileInterval:   f.reconcileEvery,
		ReleaseWorkers:      f.releaseWorkers,
		ReleaseBackoffBase:  f.backoffBase,
		ReleaseBackoffMax:   f.backoffMax,
		TLS:                 tlsConf,
		TLSAllowPlaintext:   f.tlsAllowPlain,
		TLSHandshakeTimeout: f.tlsHandshake,
		ACLEnabled:          f.aclEnabled,
		Logger:              logger,
		Autopilot:           server.AutopilotConfig{CleanupDeadServers: f.apCleanupDead},
	}
	return server.New(cfg)
}

// startDevPlugin runs the built-in hostdir plugin in this process as a
// monolith (controller and node), on a socket in the data dir.
func startDevPlugin(dataDir, nodeName string, logger hclog.Logger) (*hostdir.Plugin, error) {
	p, err := hostdir.New(hostdir.Config{
		Endpoint:          "unix://" + filepath.Join(dataDir, "hostdir.sock"),
		Root:              filepath.Join(dataDir, "hostdir"),
		NodeID:            nodeName,
		Mode:              hostdir.ModeMonolith,
		AuditLog:          filepath.Join(dataDir, "hostdir-audit.jsonl"),
		AutoCreateVolumes: true,
		Logger:            logger.Named("hostdir"),
	})
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
