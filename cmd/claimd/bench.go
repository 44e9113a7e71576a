package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/bench"
)

const benchUsage = `usage: claimd bench [flags]

Drives a running cluster over the public RPC and prints claim throughput
and latency. It registers a simulated client node (plugin "bench", no
controller) that answers the servers' node detaches at once, so it measures
the servers, not a CSI plugin. Modes:

  claim      each caller loops claim → release on distinct (alloc, volume)
             pairs; ops/s counts both calls (Volume.Claim either way)
  contended  callers race for -volumes single-node-writer volumes; counts
             wins and max_claims refusals and checks no volume ever has
             two claims at once
  release    -volumes allocs claim, are stopped together and reported
             complete; times each claim from the stop until freed
  scale      registers -nodes simulated nodes (each its own node secret and
             heartbeat, sharing -node-sessions sessions) and -volumes
             volumes each claimed by an alloc on one of them; after -settle
             measures each server's CPU and RSS for -idle while only
             heartbeats flow; with -takeover kills the leader (SIGKILL;
             servers on this machine only) and times the new leader until
             a claim is served and every node's heartbeat is accepted, and
             counts nodes marked down. Leaves its state in place.
  handoff    on a real client node and plugin (-node, -plugin): -volumes
             single-node-writer volumes, a holder and a waiter on each;
             the holders stopped together, the time until each waiter runs
             (its volume mounted), over -rounds rounds

Every mode but scale cleans up what it made when it ends: its volumes, its
node, and its allocations (finished and without claims, removed by the
system GC limited to the run's ID prefix).

Server CPU: when the servers run on this machine (loopback addresses), each
process of its own, the tool asks each for its process ID (Status.Runtime)
and reads its user+system CPU time from /proc/PID/stat at the start and end
of the measured window; it prints each server's CPU and the CPU per claim
cycle (one claim and its release; contended: one win), summed over the
servers and for the target alone. Otherwise it says why it has none.

Against a cluster with ACLs, -token (or CLAIMD_TOKEN) is a token that may
register and deregister volumes and nodes, place and stop allocs, read
evals, read the operator's Status.Runtime and, for the cleanup, run the
system GC on its own allocations (operator:write; a management token will do); the simulated node registers with it
once, then, like a client agent, authenticates every call with its node
secret, and the callers claim with that secret too. With TLS, -ca-cert,
-client-cert and -client-key (a client certificate) make every connection
mutual TLS.

Examples:
  claimd bench -address 127.0.0.1:4647 -callers 1,16,64,256 -target leader,follower
  CLAIMD_TOKEN=... claimd bench -ca-cert ca.pem -client-cert client.pem -client-key client-key.pem
  claimd bench -mode contended -volumes 8 -callers 64 -json
  claimd bench -mode release -volumes 1000
  claimd bench -mode scale -nodes 5000 -volumes 100000 -takeover
  claimd bench -report results.jsonl   (markdown tables from -json output)

Flags:
`

func runBench(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("bench", stdout, stderr)
	fs := x.fs
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	mode := fs.String("mode", string(bench.ModeClaim), "claim, contended, release, scale or handoff")
	target := fs.String("target", bench.TargetLeader, "where calls go: leader, follower or a server address; a comma-separated list runs each")
	duration := fs.Duration("duration", 10*time.Second, "measured time of each run")
	warmup := fs.Duration("warmup", time.Second, "unmeasured load before each run's measured time")
	volumes := fs.Int("volumes", 0, fmt.Sprintf("claim: pool of (alloc, volume) pairs, each used once per run (default %d); contended: volumes raced for (default %d); release: allocs stopped (default %d)",
		bench.DefaultClaimVolumes, bench.DefaultContendedVolumes, bench.DefaultReleaseVolumes))
	callers := fs.String("callers", "", "concurrent callers, each with its own session; a comma-separated list runs each (default 1,16,64,256 for claim, 64 otherwise)")
	hold := fs.Duration("hold", 0, "contended: how long a winner holds its claim before releasing")
	drainTimeout := fs.Duration("drain-timeout", 5*time.Minute, "after each run, wait this long at most for the servers to free the released claims (0: don't wait; claim runs then take fresh pairs); release mode: how long the release may take")
	nodes := fs.Int("nodes", 0, fmt.Sprintf("scale: simulated nodes (default %d)", bench.DefaultScaleNodes))
	nodeSessions := fs.Int("node-sessions", 0, "scale: sessions the nodes share (default one per 100 nodes)")
	settle := fs.Duration("settle", 10*time.Second, "scale: pause after the claims before the idle window")
	idle := fs.Duration("idle", 30*time.Second, "scale: the idle window (heartbeats only)")
	takeover := fs.Bool("takeover", false, "scale: after the idle window, kill the leader and time the takeover")
	pauseFile := fs.String("pause-file", "", "scale: after the idle window wait, nodes heartbeating, until this file exists (at most 10 min)")
	serversDetach := fs.Bool("servers-detach", false, "claim, contended: releases do not say the simulated node detached the claim itself, so the servers drive a node detach per release (as for an agent older than that statement)")
	keep := fs.Bool("keep", false, "leave the volumes and the simulated node registered at the end")
	handoffNode := fs.String("node", "", "handoff: the client node to run on (ID, ID prefix or name; default the first ready node with -plugin healthy)")
	handoffPlugin := fs.String("plugin", "hostdir", "handoff: the node plugin of the volumes (any plugin the node runs, by its ID)")
	rounds := fs.Int("rounds", 5, "handoff: handoffs of every volume timed")
	asJSON := fs.Bool("json", false, "print one JSON object per run")
	report := fs.String("report", "", "render FILE (JSON lines from -json runs, - for stdin) as markdown tables and exit")
	logLevel := fs.String("log-level", "warn", "log level of the tool's own log (stderr)")
	if _, ok := x.parse(args, noArguments); !ok {
		return 1
	}
	if *report != "" {
		return benchReport(*report, stdout, stderr)
	}
	counts, err := parseCallers(*callers)
	if err != nil {
		return fail(stderr, "-callers: %v", err)
	}
	// The servers' addresses, the token and TLS as every command takes
	// them (-address, -token, -ca-cert, -client-cert, -client-key, -region
	// and their CLAIMD_* variables).
	ac, err := x.conn.apiConfig()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	cfg := bench.Config{
		Addresses:     ac.Addresses,
		Token:         ac.Token,
		TLS:           ac.TLS,
		Targets:       splitList(*target),
		Mode:          bench.Mode(*mode),
		Duration:      *duration,
		Warmup:        *warmup,
		Volumes:       *volumes,
		Callers:       counts,
		Hold:          *hold,
		CallTimeout:   x.conn.timeout,
		DrainTimeout:  *drainTimeout,
		KeepState:     *keep,
		ServersDetach: *serversDetach,
		Nodes:         *nodes,
		NodeSessions:  *nodeSessions,
		Settle:        *settle,
		Idle:          *idle,
		Takeover:      *takeover,
		PauseFile:     *pauseFile,
		HandoffNode:   *handoffNode,
		HandoffPlugin: *handoffPlugin,
		Rounds:        *rounds,
		Progress:      stderr,
		Logger:        hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.LevelFromString(*logLevel), Output: stderr}),
	}
	// The first signal stops the runs (the tool then frees and removes
	// what it created); a second one kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	ok := true
	enc := json.NewEncoder(stdout)
	err = bench.Run(ctx, cfg, func(r *bench.Result) {
		ok = ok && r.OK()
		if *asJSON {
			_ = enc.Encode(r)
			return
		}
		r.WriteText(stdout)
	})
	if errors.Is(err, context.Canceled) {
		return fail(stderr, "bench: interrupted: %v", err)
	}
	if err != nil {
		return fail(stderr, "bench: %v", err)
	}
	if !ok {
		fmt.Fprintln(stderr, "bench: some runs saw errors or violations (see above)")
		return 1
	}
	return 0
}

func parseCallers(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchReport reads -json output and prints it as markdown tables.
func benchReport(path string, stdout, stderr io.Writer) int {
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return fail(stderr, "%v", err)
		}
		defer f.Close()
		in = f
	}
	var rs []*bench.Result
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r bench.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fail(stderr, "%s:%d: %v", path, line, err)
		}
		rs = append(rs, &r)
	}
	if err := sc.Err(); err != nil {
		return fail(stderr, "%s: %v", path, err)
	}
	bench.WriteMarkdown(stdout, rs)
	return 0
}
