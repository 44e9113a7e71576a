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
	"github.com/claimd/claimd/server"
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
	fs := newFlagSet("agent", stderr)
	fs.BoolVar(&f.server, "server", false, "run a server (Raft member)")
	fs.BoolVar(&f.client, "client", false, "run a client agent (with -servers and -csi-plugin)")
	fs.StringVar(&f.servers, "servers", "", "client: server addresses, comma-separated")
	fs.Var(&f.plugins, "csi-plugin", "client: a CSI plugin, id=ID,type=node|controller|monolith,socket=PATH (repeatable)")
	fs.BoolVar(&f.dev, "dev", false, "run a single-server cluster with state in a temporary directory")
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
	fs.StringVar(&f.debugAddr, "debug-addr", "", "serve Go's pprof profiles on this host:port (loopback only, e.g. 127.0.0.1:6060)")
	fs.BoolVar(&f.leaveOnTerm, "leave-on-terminate", false, "leave the Raft configuration on SIGINT/SIGTERM instead of just stopping")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		return fail(stderr, "unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return fail(stderr, "-log-level: %q is not one of trace, debug, info, warn, error", f.logLevel)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "claimd", Level: level, JSONFormat: f.logJSON, Output: stderr})

	var stops []func()
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
	var srv *server.Server
	if f.server {
		var err error
		if srv, err = startServer(f, logger); err != nil {
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
	if f.client {
		servers := splitList(f.servers)
		if len(servers) == 0 && srv != nil {
			servers = []string{srv.Addr()}
		}
		dataDir := f.dataDir
		if f.server {
			dataDir = filepath.Join(f.dataDir, "client")
		}
		agent, err := client.New(client.Config{
			Servers: servers, DataDir: dataDir, NodeName: f.nodeName, Plugins: f.plugins, Logger: logger,
			ProbeInterval: f.probeInterval,
		})
		if err != nil {
			return fail(stderr, "start client: %v", err)
		}
		stops = append(stops, agent.Shutdown)
		fmt.Fprintf(stdout, "claimd client running: node=%s servers=%s\n", agent.NodeID(), strings.Join(servers, ","))
	}

	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM)
	sig := <-sigCh
	logger.Info("caught signal; stopping", "signal", sig.String())
	return 0
}

func startServer(f agentFlags, logger hclog.Logger) (*server.Server, error) {
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
		Logger:             logger,
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
