package main

import (
	"errors"
	"fmt"
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
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/tlsutil"
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
	leaveOnTerm     bool
	servers         string
	plugins         pluginFlags
	heartbeatTTL    time.Duration
	claimGCInterval time.Duration
	releaseWorkers  int
	backoffBase     time.Duration
	backoffMax      time.Duration
	probeInterval   time.Duration
	debugAddr       string
	httpAddr        string
	tls             tlsutil.Config
	tlsAllowPlain   bool
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

func runAgent(args []string, stdout, stderr io.Writer) int {
	var f agentFlags
	// Gauges without the host name in their key: Prometheus labels the
	// instance itself (telemetry { disable_hostname = false } restores it).
	f.disableHostname = true
	var configs configPaths
	fs := newFlagSet("agent", stderr)
	fs.Var(&configs, "config", "an HCL or JSON configuration file, or a directory of *.hcl and *.json files (repeatable; later files override earlier ones, flags override files)")
	fs.BoolVar(&f.server, "server", false, "run a server (Raft member)")
	fs.BoolVar(&f.client, "client", false, "run a client agent (with -servers and -csi-plugin)")
	fs.StringVar(&f.servers, "servers", "", "client: server addresses, comma-separated")
	fs.Var(&f.plugins, "csi-plugin", "client: a CSI plugin, id=ID,type=node|controller|monolith,socket=PATH (repeatable)")
	fs.BoolVar(&f.dev, "dev", false, "run a single-server cluster with state in a temporary directory (mutual TLS and ACLs on, with its own CA and management token)")
	fs.BoolVar(&f.devInsecure, "dev-insecure", false, "with -dev: plaintext and no ACLs (for trying the plaintext path only)")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "bootstrap once this many servers know each other")
	fs.StringVar(&f.join, "join", "", "addresses of other servers, comma-separated")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for the server ID, Raft log and snapshots")
	fs.StringVar(&f.bind, "bind", api.DefaultAddress, "the one RPC/Raft address, host:port")
	fs.StringVar(&f.advertise, "advertise", "", "address other servers dial (default: -bind)")
	fs.StringVar(&f.nodeName, "node-name", "", "node name (default: host name)")
	fs.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines")
	fs.Float64Var(&f.raftMultiplier, "raft-multiplier", 1, "scale Raft timeouts (1 = production; tests use less)")
	fs.DurationVar(&f.heartbeatTTL, "heartbeat-ttl", 10*time.Second, "server: how soon client nodes must heartbeat before they are marked down")
	fs.DurationVar(&f.claimGCInterval, "claim-gc-interval", 5*time.Minute, "server: how often the claim GC looks for past claims without an eval")
	fs.IntVar(&f.releaseWorkers, "release-workers", 16, "server: volumes released in parallel by the leader")
	fs.DurationVar(&f.backoffBase, "release-backoff-base", time.Second, "server: first retry delay of a failed release (doubles each attempt)")
	fs.DurationVar(&f.backoffMax, "release-backoff-max", time.Minute, "server: longest retry delay of a failed release")
	fs.DurationVar(&f.probeInterval, "plugin-probe-interval", 5*time.Second, "client: how often CSI plugins are health-probed")
	fs.StringVar(&f.httpAddr, "http-addr", httpapi.DefaultAddr, "serve the HTTP API on this host:port (HTTPS with a client certificate when TLS is on; \"\" or off disables)")
	fs.StringVar(&f.debugAddr, "debug-addr", "", "serve Go's pprof profiles on this host:port (loopback only, e.g. 127.0.0.1:6060)")
	fs.BoolVar(&f.leaveOnTerm, "leave-on-terminate", false, "leave the Raft configuration on SIGINT/SIGTERM instead of just stopping")
	fs.BoolVar(&f.apCleanupDead, "autopilot-cleanup-dead-servers", false, "server: the leader removes a server unreachable for 5 minutes from the Raft configuration, only while a quorum stays")
	fs.StringVar(&f.tls.CAFile, "tls-ca-file", "", "CA certificate (PEM); with -tls-cert-file and -tls-key-file turns mutual TLS on")
	fs.StringVar(&f.tls.CertFile, "tls-cert-file", "", "this agent's certificate (PEM): server.<region>.claimd or client.<region>.claimd")
	fs.StringVar(&f.tls.KeyFile, "tls-key-file", "", "the key of -tls-cert-file (PEM)")
	fs.BoolVar(&f.tls.VerifyServerHostname, "tls-verify-server-hostname", true, "require servers' certificates to name server.<region>.claimd")
	fs.StringVar(&f.tls.Region, "region", tlsutil.DefaultRegion, "region named in certificates")
	fs.BoolVar(&f.tlsAllowPlain, "tls-allow-plaintext", false, "migration mode: accept plaintext beside TLS while a cluster is switched (never leave it on)")
	fs.BoolVar(&f.aclEnabled, "acl-enabled", false, "server: check ACL tokens on every call")
	fs.StringVar(&f.aclToken, "acl-token", "", "client: a token that grants node:write, to register a new node when ACLs are on without TLS (default $CLAIMD_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		return fail(stderr, "unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	configFiles, err := loadAgentConfig(fs, &f, configs)
	if err != nil {
		return fail(stderr, "%v", err)
	}
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return fail(stderr, "-log-level: %q is not one of trace, debug, info, warn, error", f.logLevel)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "claimd", Level: level, JSONFormat: f.logJSON, Output: stderr})

	var stops []func()
	var devSec *devPKI
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	if f.dev {
		f.server, f.client = true, true
		f.bootstrapExpect = 1
		if f.dataDir == "" {
			dir, err := os.MkdirTemp("", "claimd-dev-")
			if err != nil {
				return fail(stderr, "%v", err)
			}
			stops = append(stops, func() { os.RemoveAll(dir) })
			f.dataDir = dir
		}
		if f.nodeName == "" {
			f.nodeName = "dev"
		}
		if !f.devInsecure && !f.tls.Enabled() {
			var err error
			if devSec, err = newDevPKI(f.dataDir); err != nil {
				return fail(stderr, "dev certificates: %v", err)
			}
			f.tls, f.aclEnabled = devSec.agentTLS(), true
		}
		plug, err := startDevPlugin(f.dataDir, f.nodeName, logger)
		if err != nil {
			return fail(stderr, "start built-in plugin: %v", err)
		}
		stops = append(stops, plug.Stop)
		f.plugins = append(f.plugins, csi.PluginConfig{ID: "hostdir", Type: csi.PluginTypeMonolith, Socket: plug.Endpoint()})
		fmt.Fprintf(stdout, "built-in hostdir plugin: socket=%s root=%s\n", plug.Endpoint(), filepath.Join(f.dataDir, "hostdir"))
	}
	if !f.server && !f.client {
		return fail(stderr, "choose -server, -client or -dev")
	}
	if f.debugAddr != "" {
		stop, err := serveDebug(f.debugAddr, logger)
		if err != nil {
			return fail(stderr, "-debug-addr: %v", err)
		}
		stops = append(stops, stop)
	}
	var tlsConf *tlsutil.Configurator
	if f.tls.Enabled() {
		var err error
		if tlsConf, err = tlsutil.NewConfigurator(f.tls); err != nil {
			return fail(stderr, "%v", err)
		}
	} else if f.tlsAllowPlain {
		return fail(stderr, "-tls-allow-plaintext needs -tls-ca-file, -tls-cert-file and -tls-key-file")
	}
	var srv *server.Server
	if f.server {
		var err error
		if srv, err = startServer(f, tlsConf, logger); err != nil {
			return fail(stderr, "start server: %v", err)
		}
		stops = append(stops, func() {
			var err error
			if f.leaveOnTerm {
				err = srv.Leave(30 * time.Second)
			} else {
				err = srv.Shutdown()
			}
			if err != nil && !errors.Is(err, os.ErrClosed) {
				logger.Error("server shutdown", "error", err)
			}
		})
		fmt.Fprintf(stdout, "claimd server running: id=%s addr=%s data-dir=%s\n", srv.ID(), srv.Addr(), f.dataDir)
	}
	var agent *client.Agent
	servers := splitList(f.servers)
	if f.client {
		if len(servers) == 0 && srv != nil {
			servers = []string{srv.Addr()}
		}
		dataDir := f.dataDir
		if f.server {
			dataDir = filepath.Join(f.dataDir, "client")
		}
		var err error
		agent, err = client.New(client.Config{
			Servers: servers, DataDir: dataDir, NodeName: f.nodeName, Plugins: f.plugins, Logger: logger,
			ProbeInterval: f.probeInterval, TLS: tlsConf, TLSAllowPlaintext: f.tlsAllowPlain,
			RegisterToken: api.TokenFromEnv(f.aclToken),
		})
		if err != nil {
			return fail(stderr, "start client: %v", err)
		}
		stops = append(stops, agent.Shutdown)
		fmt.Fprintf(stdout, "claimd client running: node=%s servers=%s\n", agent.NodeID(), strings.Join(servers, ","))
	}
	if !httpDisabled(f.httpAddr) {
		h, err := startHTTP(f, srv, agent, servers, tlsConf, logger)
		if err != nil {
			return fail(stderr, "-http-addr: %v", err)
		}
		stops = append(stops, func() { h.Shutdown() })
		fmt.Fprintf(stdout, "claimd HTTP API: %s\n", h.URL())
	}
	if devSec != nil && srv != nil {
		line, err := devSec.bootstrap(srv.Addr(), time.Minute)
		if err != nil {
			return fail(stderr, "%v", err)
		}
		// Shown once, to the one who started the agent (like acl
		// bootstrap's output); never logged.
		fmt.Fprintf(stdout, "dev agent: mutual TLS and ACLs are on. In another shell, for the CLI:\n  source %s\nwhich is:\n  %s\n", devSec.envFile, line)
	}

	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	for sig := range sigCh {
		if sig != syscall.SIGHUP {
			logger.Info("caught signal; stopping", "signal", sig.String())
			break
		}
		// Existing connections (Raft among them) keep going; new ones
		// use what was reloaded.
		configFiles.reload(reloadTargets{logger: logger, tls: tlsConf, srv: srv})
	}
	return 0
}

func startServer(f agentFlags, tlsConf *tlsutil.Configurator, logger hclog.Logger) (*server.Server, error) {
	cfg := server.Config{
		NodeName:           f.nodeName,
		DataDir:            f.dataDir,
		BindAddr:           f.bind,
		AdvertiseAddr:      f.advertise,
		BootstrapExpect:    f.bootstrapExpect,
		Join:               splitList(f.join),
		RaftMultiplier:     f.raftMultiplier,
		HeartbeatTTL:       f.heartbeatTTL,
		ClaimGCInterval:    f.claimGCInterval,
		ReleaseWorkers:     f.releaseWorkers,
		ReleaseBackoffBase: f.backoffBase,
		ReleaseBackoffMax:  f.backoffMax,
		TLS:                tlsConf,
		TLSAllowPlaintext:  f.tlsAllowPlain,
		ACLEnabled:         f.aclEnabled,
		Logger:             logger,
		Autopilot:          server.AutopilotConfig{CleanupDeadServers: f.apCleanupDead},
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
