package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/api"
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
}

func runAgent(args []string, stdout, stderr io.Writer) int {
	var f agentFlags
	fs := newFlagSet("agent", stderr)
	fs.BoolVar(&f.server, "server", false, "run a server (Raft member)")
	fs.BoolVar(&f.client, "client", false, "run a client agent (not yet available)")
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

	if f.dev {
		f.server = true
		f.bootstrapExpect = 1
		if f.dataDir == "" {
			dir, err := os.MkdirTemp("", "claimd-dev-")
			if err != nil {
				return fail(stderr, "%v", err)
			}
			defer os.RemoveAll(dir)
			f.dataDir = dir
		}
	}
	if f.client {
		return fail(stderr, "-client: client agents are not available yet")
	}
	if !f.server {
		return fail(stderr, "choose -server or -dev")
	}
	cfg := server.Config{
		NodeName:        f.nodeName,
		DataDir:         f.dataDir,
		BindAddr:        f.bind,
		AdvertiseAddr:   f.advertise,
		BootstrapExpect: f.bootstrapExpect,
		Join:            splitList(f.join),
		RaftMultiplier:  f.raftMultiplier,
		Logger:          logger,
	}
	srv, err := server.New(cfg)
	if err != nil {
		return fail(stderr, "start server: %v", err)
	}
	fmt.Fprintf(stdout, "claimd server running: id=%s addr=%s data-dir=%s\n", srv.ID(), srv.Addr(), f.dataDir)

	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM)
	sig := <-sigCh
	logger.Info("caught signal", "signal", sig.String())
	if f.leaveOnTerm {
		err = srv.Leave(30 * time.Second)
	} else {
		err = srv.Shutdown()
	}
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return fail(stderr, "shutdown: %v", err)
	}
	return 0
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

var _ = flag.ContinueOnError
