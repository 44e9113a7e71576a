package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/bench"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// TestBench_EveryModeAgainstThreeServers runs each mode briefly against
// an in-process three-server cluster and checks the results are sane:
// calls counted, no unexpected errors, contended safety held, every
// released claim freed, and nothing left registered afterwards. It checks
// no figure: timing belongs to `claimd bench` on a quiet machine.
//
// The cluster runs as production should (mutual TLS, ACLs), and the tool
// has a cli certificate and a token that grants everything it does itself
// but volume:claim: every claim and release then succeeds only because the
// callers authenticate as the simulated node with its secret, as its agent
// would; and the node registers with the token (a cli certificate does not
// admit a new node). No server may have refused any call.
func TestBench_EveryModeAgainstThreeServers(t *testing.T) {
	c, addrs := mustNewCluster(t, harness.Options{})
	base := benchConfig(t, c, mustBenchToken(t, c, addrs[0]))
	defer mustSeeNoDenial(t, c, addrs)
	run := func(t *testing.T, cfg bench.Config) []*bench.Result {
		t.Helper()
		cfg.Token, cfg.TLS = base.Token, base.TLS
		return mustRun(t, cfg)
	}

	t.Run("claim", func(t *testing.T) {
		rs := run(t, bench.Config{
			Addresses: addrs[:1], Mode: bench.ModeClaim, Targets: []string{bench.TargetLeader, bench.TargetFollower},
			Callers: []int{1, 4}, Volumes: 2000, Duration: time.Second, Warmup: 200 * time.Millisecond,
		})
		if len(rs) != 4 {
			t.Fatalf("exp: 4 runs (2 callers × 2 targets) got: %d", len(rs))
		}
		for _, r := range rs {
			if r.Security != "tls+acl" {
				t.Errorf("%s/%d: exp: security tls+acl got: %q", r.Target, r.Callers, r.Security)
			}
			if r.Ops == 0 || r.Claims == 0 || r.Releases == 0 || r.OpsPerSec <= 0 {
				t.Errorf("%s/%d: exp: claims and releases counted got: ops %d claims %d releases %d", r.Target, r.Callers, r.Ops, r.Claims, r.Releases)
			}
			if len(r.Errors) != 0 {
				t.Errorf("%s/%d: exp: no errors got: %v", r.Target, r.Callers, r.Errors)
			}
			if r.Latency.Count != int(r.Ops) || r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
				t.Errorf("%s/%d: exp: ordered percentiles over every call got: %+v", r.Target, r.Callers, r.Latency)
			}
			if r.PoolExhausted {
				t.Errorf("%s/%d: exp: a pool of 2000 pairs lasts a second got: used up", r.Target, r.Callers)
			}
			// The servers run inside the test process: their CPU cannot be
			// told from the load generator's, and the run must say so
			// rather than report the whole process's CPU as theirs.
			if r.ServerCPU != nil || !strings.Contains(r.NoCPU, "inside this process") {
				t.Errorf("%s/%d: exp: no CPU figures for in-process servers got: %v (%q)", r.Target, r.Callers, r.ServerCPU, r.NoCPU)
			}
		}
		for _, r := range rs {
			if (r.Target == bench.TargetLeader) != (r.Address == r.Leader) {
				t.Errorf("exp: leader runs go to the leader, follower runs elsewhere got: %s run sent to %s, leader %s",
					r.Target, r.Address, r.Leader)
			}
			if !r.Drained {
				t.Errorf("%s/%d: exp: released claims freed within the drain timeout got: %d left", r.Target, r.Callers, r.Backlog)
			}
		}
		mustBeCleanedUp(t, c, addrs)
	})

	t.Run("claim pool used up", func(t *testing.T) {
		rs := run(t, bench.Config{
			Addresses: addrs, Mode: bench.ModeClaim, Callers: []int{2}, Volumes: 10, Duration: 5 * time.Second,
		})
		r := rs[0]
		if !r.PoolExhausted || r.Claims != 10 || r.Releases != 10 || r.Seconds >= 5 {
			t.Errorf("exp: the run stops after 10 pairs got: exhausted %t, %d claims, %d releases in %.1fs",
				r.PoolExhausted, r.Claims, r.Releases, r.Seconds)
		}
		mustBeCleanedUp(t, c, addrs)
	})

	t.Run("contended", func(t *testing.T) {
		rs := run(t, bench.Config{
			Addresses: addrs, Mode: bench.ModeContended, Callers: []int{6}, Volumes: 2,
			Duration: 1500 * time.Millisecond, Warmup: 100 * time.Millisecond,
		})
		r := rs[0]
		if r.Wins == 0 || r.Refusals == 0 {
			t.Errorf("exp: wins and max_claims refusals got: wins %d refusals %d", r.Wins, r.Refusals)
		}
		if len(r.Errors) != 0 {
			t.Errorf("exp: no errors but max_claims got: %v", r.Errors)
		}
		if r.Checks == 0 || len(r.Violations) != 0 {
			t.Errorf("exp: safety checked, no violation got: %d checks, violations %v", r.Checks, r.Violations)
		}
		mustBeCleanedUp(t, c, addrs)
	})

	t.Run("release", func(t *testing.T) {
		rs := run(t, bench.Config{
			Addresses: addrs, Mode: bench.ModeRelease, Callers: []int{8}, Volumes: 40,
		})
		r := rs[0]
		if r.Allocs != 40 || r.Freed != 40 {
			t.Errorf("exp: 40 allocs stopped and 40 claims freed got: %d stopped, %d freed", r.Allocs, r.Freed)
		}
		if r.StopToFreed == nil || r.StopToFreed.Count != 40 || r.FreedPerSec <= 0 {
			t.Errorf("exp: 40 stop→freed times got: %+v, %.1f/s", r.StopToFreed, r.FreedPerSec)
		}
		if len(r.Errors) != 0 {
			t.Errorf("exp: no errors got: %v", r.Errors)
		}
		mustBeCleanedUp(t, c, addrs)
	})

	// Last: scale mode leaves its state in place.
	t.Run("scale", func(t *testing.T) {
		rs := run(t, bench.Config{
			Addresses: addrs, Mode: bench.ModeScale, Callers: []int{8}, Nodes: 20, NodeSessions: 3, Volumes: 200,
			Settle: 100 * time.Millisecond, Idle: 1500 * time.Millisecond, Takeover: true, Prefix: "scaletest",
		})
		r := rs[0]
		if r.Nodes != 20 || r.NodeSessions != 3 || r.Claims != 200 || len(r.Errors) != 0 {
			t.Fatalf("exp: 20 nodes on 3 sessions, 200 claims, no errors got: %d nodes, %d sessions, %d claims, errors %v",
				r.Nodes, r.NodeSessions, r.Claims, r.Errors)
		}
		// The harness hands out a 2 s TTL: every node heartbeats (every
		// third of it) within the 1.5 s idle window.
		if r.HeartbeatsPerSec <= 0 {
			t.Errorf("exp: heartbeats accepted while idle got: %.1f/s", r.HeartbeatsPerSec)
		}
		// In-process servers: no CPU, RSS or kill, and the run says why.
		if r.Idle != nil || !strings.Contains(r.NoCPU, "inside this process") {
			t.Errorf("exp: no per-server figures for in-process servers got: %v (%q)", r.Idle, r.NoCPU)
		}
		if r.Takeover == nil || r.Takeover.KilledPID != 0 || !strings.Contains(r.Takeover.Error, "not killed") {
			t.Errorf("exp: no takeover without the leader's process got: %+v", r.Takeover)
		}
		cl := mustClient(t, c, addrs...)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		nodes, _, err := cl.Nodes(ctx, structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, n := range nodes {
			if strings.HasPrefix(n.ID, "scaletest-n") && n.Status == structs.NodeStatusReady {
				ready++
			}
		}
		if ready != 20 {
			t.Errorf("exp: 20 simulated nodes ready got: %d", ready)
		}
		// Volume i is claimed by alloc i on node i mod 20, as that node.
		for _, i := range []int{0, 19, 20, 199} {
			id := fmt.Sprintf("scaletest-v%06d", i)
			v, _, err := cl.Volume(ctx, id, structs.QueryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			alloc := fmt.Sprintf("scaletest-a%06d", i)
			node := fmt.Sprintf("scaletest-n%05d", i%20)
			if c := v.WriteClaims[alloc]; c == nil || c.NodeID != node {
				t.Errorf("%s: exp: claimed by %s on %s got: %v", id, alloc, node, v.WriteClaims)
			}
		}
	})
}

// TestWriteMarkdown_OneTablePerMode checks the report renders every mode
// it is given, once.
func TestWriteMarkdown_OneTablePerMode(t *testing.T) {
	var b strings.Builder
	bench.WriteMarkdown(&b, []*bench.Result{
		{Mode: bench.ModeClaim, Target: "leader", Callers: 1, OpsPerSec: 100},
		{Mode: bench.ModeClaim, Target: "follower", Callers: 1, OpsPerSec: 90},
		{Mode: bench.ModeContended, Target: "leader", Callers: 64, Volumes: 8, Wins: 3},
		{Mode: bench.ModeRelease, Target: "leader", Allocs: 1000, Freed: 1000},
	})
	out := b.String()
	for _, want := range []string{"| leader | 1 | 100 |", "| follower | 1 | 90 |", "| leader | 64 | 8 |", "| leader | 1000 | 1000 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("exp: a row starting %q got:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n| --- |"); n != 3 {
		t.Errorf("exp: 3 tables got: %d\n%s", n, out)
	}
}

// TestBench_Plaintext runs a short claim run against a cluster without TLS
// and ACLs, the other half of scripts/bench.sh's security comparison: the
// callers still send the node's secret, which the servers then need not
// check.
func TestBench_Plaintext(t *testing.T) {
	c, addrs := mustNewCluster(t, harness.Options{Insecure: true})
	rs := mustRun(t, bench.Config{
		Addresses: addrs, Mode: bench.ModeClaim, Callers: []int{4}, Volumes: 2000,
		Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond,
	})
	if r := rs[0]; r.Security != "" {
		t.Errorf("exp: security plaintext (\"\") got: %q", r.Security)
	}
	if r := rs[0]; r.Claims == 0 || r.Releases == 0 || len(r.Errors) != 0 || !r.Drained {
		t.Errorf("exp: claims and releases, no errors, every claim freed got: %d claims, %d releases, errors %v, drained %t",
			r.Claims, r.Releases, r.Errors, r.Drained)
	}
	mustBeCleanedUp(t, c, addrs)
}

// mustNewCluster starts three in-process servers on loopback and waits
// for a leader every server knows.
func mustNewCluster(t *testing.T, opts harness.Options) (*harness.Cluster, []string) {
	t.Helper()
	c := harness.NewCluster(t, 3, opts)
	c.StartAll()
	c.WaitForLeader(30 * time.Second)
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.Addr)
	}
	return c, addrs
}

// benchPolicy grants what the tool does with its own token, and not
// volume:claim: claims must be made with the simulated node's secret.
// operator:read lets it ask each server for its process ID (Status.Runtime)
// for the CPU figures.
const benchPolicy = `
operator {
  policy = "write"
}
volume {
  policy       = "read"
  capabilities = ["register", "deregister"]
}
alloc {
  capabilities = ["place", "stop"]
}
node {
  policy = "write"
}
`

// mustBenchToken creates a client token with benchPolicy.
func mustBenchToken(t *testing.T, c *harness.Cluster, addr string) string {
	t.Helper()
	cl := mustClient(t, c, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := cl.ACLPolicyApply(ctx, "bench", "claimd bench without volume:claim", benchPolicy); err != nil {
		t.Fatalf("exp: policy applied got: %v", err)
	}
	tok, err := cl.ACLTokenCreate(ctx, "bench", structs.ACLTokenClient, []string{"bench"}, 0)
	if err != nil {
		t.Fatalf("exp: token created got: %v", err)
	}
	// Status.Runtime (the tool's CPU probe) is answered by each server
	// from its own state: a follower that has not applied the token yet
	// would deny it.
	c.WaitForApplied(tok.CreateIndex, 30*time.Second)
	return tok.SecretID
}

// benchConfig is the tool's token and TLS for c (the cli certificate, as
// `claimd bench -ca-cert -client-cert -client-key` would use).
func benchConfig(t *testing.T, c *harness.Cluster, token string) bench.Config {
	t.Helper()
	ac := c.APIConfig(c.Servers[0].Addr, token)
	if ac.TLS == nil {
		t.Fatal("exp: a TLS cluster got: plaintext")
	}
	return bench.Config{Token: ac.Token, TLS: ac.TLS}
}

// mustClient is an api client to addr with the management token (and the
// cli certificate when TLS is on).
func mustClient(t *testing.T, c *harness.Cluster, addrs ...string) *api.Client {
	t.Helper()
	cfg := c.APIConfig(addrs[0], c.ManagementToken())
	cfg.Addresses = addrs
	cl, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// mustSeeNoDenial checks that no server refused a call: the tool sent the
// credential every call needs.
func mustSeeNoDenial(t *testing.T, c *harness.Cluster, addrs []string) {
	t.Helper()
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		rt, err := mustClient(t, c, a).Runtime(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: runtime: %v", a, err)
		}
		if rt.ACLDenied != 0 || rt.TLSHandshakeFails != 0 || rt.PlaintextRefused != 0 {
			t.Errorf("%s: exp: no call refused got: %d ACL denials, %d failed handshakes, %d plaintext connections refused",
				a, rt.ACLDenied, rt.TLSHandshakeFails, rt.PlaintextRefused)
		}
	}
}

// mustRun runs one invocation and returns its results.
func mustRun(t *testing.T, cfg bench.Config) []*bench.Result {
	t.Helper()
	var progress bytes.Buffer
	cfg.Progress = &progress
	cfg.CallTimeout = 30 * time.Second
	cfg.DrainTimeout = 30 * time.Second
	var out []*bench.Result
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := bench.Run(ctx, cfg, func(r *bench.Result) { out = append(out, r) })
	t.Logf("progress:\n%s", progress.String())
	for _, r := range out {
		var b strings.Builder
		r.WriteText(&b)
		t.Logf("result:\n%s", b.String())
	}
	if err != nil {
		t.Fatalf("exp: no error got: %v", err)
	}
	if len(out) == 0 {
		t.Fatal("exp: at least one result got: none")
	}
	return out
}

// mustBeCleanedUp checks that a finished invocation left no volume of the
// bench plugin and no node behind.
func mustBeCleanedUp(t *testing.T, hc *harness.Cluster, addrs []string) {
	t.Helper()
	c := mustClient(t, hc, addrs...)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	vols, _, err := c.Volumes(ctx, bench.PluginID, structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 0 {
		t.Fatalf("exp: no bench volumes after the run got: %d (first %s)", len(vols), vols[0].ID)
	}
	nodes, _, err := c.Nodes(ctx, structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 0 {
		t.Fatalf("exp: the simulated node deregistered got: %d nodes (first %s)", len(nodes), nodes[0].ID)
	}
	// A benchmark against a real cluster left 60,000 allocations behind.
	allocs, _, err := c.Allocs(ctx, "", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 0 {
		t.Fatalf("exp: the benchmark's allocations removed got: %d (first %s, %s)", len(allocs), allocs[0].ID, allocs[0].ClientStatus)
	}
}

// Repeated runs of one configuration are one row: the median run, the
// range of all, and the errors of every run (not only the median's).
func TestWriteMarkdown_RepeatedRunsShowTheMedianAndRange(t *testing.T) {
	var b strings.Builder
	bench.WriteMarkdown(&b, []*bench.Result{
		{Mode: bench.ModeClaim, Target: "leader", Callers: 64, OpsPerSec: 3000},
		{Mode: bench.ModeClaim, Target: "follower", Callers: 64, OpsPerSec: 2000},
		{Mode: bench.ModeClaim, Target: "leader", Callers: 64, OpsPerSec: 2500, Errors: map[string]int64{"timeout": 2}},
		{Mode: bench.ModeClaim, Target: "leader", Callers: 64, OpsPerSec: 2800},
	})
	out := b.String()
	for _, want := range []string{
		"| leader | 64 | 2800 |",
		"| timeout 2 | 3, median shown; 2500 to 3000 |",
		"| follower | 64 | 2000 |",
		"| none | 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exp: %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "| leader |"); n != 1 {
		t.Errorf("leader rows exp: 1 got: %d\n%s", n, out)
	}
}

// Secured and plaintext runs of one configuration are separate rows, and
// a second table gives the cost: the ratio of the medians, and the ratio
// within each pair of runs made next to each other.
func TestWriteMarkdown_SecurityCostComparesWithPlaintext(t *testing.T) {
	var b strings.Builder
	var rs []*bench.Result
	for _, ops := range [][2]float64{{1000, 900}, {1200, 960}, {800, 760}} {
		rs = append(rs,
			&bench.Result{Mode: bench.ModeClaim, Target: "leader", Callers: 64, OpsPerSec: ops[0], Latency: bench.Latency{P50: 2, P99: 10}},
			&bench.Result{Mode: bench.ModeClaim, Target: "leader", Callers: 64, OpsPerSec: ops[1], Security: "tls+acl", Latency: bench.Latency{P50: 3, P99: 12}})
	}
	bench.WriteMarkdown(&b, rs)
	out := b.String()
	for _, want := range []string{
		"| plaintext | leader | 64 | 1000 |",
		"| tls+acl | leader | 64 | 900 |",
		"| tls+acl | leader | 64 | 1000 | 900 | 0.90 | 10% | 2.00ms → 3.00ms | 10.00ms → 12.00ms | 0.90, 0.80, 0.95 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exp: %q in:\n%s", want, out)
		}
	}
}
