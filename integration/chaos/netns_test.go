package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/structs"
)

// nsTestWait bounds every condition the smoke test waits for: elections
// take about a second at multiplier 0.5, node-down about two TTLs, a
// plugin's health change one probe (5 s) plus a heartbeat.
const nsTestWait = 20 * time.Second

func nsTestCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nsWaitFor polls fn until it returns nil, failing the test with fn's last
// error after nsTestWait.
func nsWaitFor(t *testing.T, what string, fn func() error) {
	t.Helper()
	if err := nsPoll(nsTestWait, fn); err != nil {
		t.Fatalf("%s: not within %s: %v", what, nsTestWait, err)
	}
}

// nsWaitNewLeader waits until a majority names a leader other than those
// in not, and returns it.
func nsWaitNewLeader(t *testing.T, c Cluster, not ...string) string {
	t.Helper()
	var leader string
	nsWaitFor(t, fmt.Sprintf("a leader other than %v", not), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		leader = c.Leader(ctx)
		if leader == "" || slices.Contains(not, leader) {
			return fmt.Errorf("leader exp: not in %v got: %q", not, leader)
		}
		return nil
	})
	return leader
}

// nsWaitAgree waits until every server answers and names the same leader.
func nsWaitAgree(t *testing.T, c *netnsCluster) string {
	t.Helper()
	var leader string
	nsWaitFor(t, "all servers agree on a leader", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		views := c.leaderViews(ctx)
		leader = views[c.names[0]]
		for _, v := range views {
			if v == "" || v[0] == '?' || v != leader {
				return fmt.Errorf("leader views exp: one leader got: %v", views)
			}
		}
		return nil
	})
	return leader
}

// nsWaitDigests waits until every server reports the same digest at the
// same applied index, at least minIndex (S2).
func nsWaitDigests(t *testing.T, c Cluster, minIndex uint64) *structs.StateDigest {
	t.Helper()
	var first *structs.StateDigest
	nsWaitFor(t, fmt.Sprintf("identical digests at index >= %d", minIndex), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		first = nil
		for _, s := range c.Servers() {
			d, err := c.Digest(ctx, s)
			if err != nil {
				return err
			}
			if d.AppliedIndex < minIndex {
				return fmt.Errorf("%s applied index exp: >= %d got: %d", s, minIndex, d.AppliedIndex)
			}
			if first == nil {
				first = d
				continue
			}
			if d.AppliedIndex != first.AppliedIndex || d.SHA256 != first.SHA256 {
				return fmt.Errorf("%s digest exp: %d/%s got: %d/%s", s, first.AppliedIndex, first.SHA256[:12], d.AppliedIndex, d.SHA256[:12])
			}
		}
		return nil
	})
	return first
}

// nsClients hands out one workload client per server (Client makes a new
// one on every call).
func nsClients(c Cluster) func(server string) *api.Client {
	var mu sync.Mutex
	m := map[string]*api.Client{}
	return func(server string) *api.Client {
		mu.Lock()
		defer mu.Unlock()
		if m[server] == nil {
			m[server] = c.Client(server)
		}
		return m[server]
	}
}

func nsRegister(t *testing.T, client func(string) *api.Client, via, id string, mode structs.AccessMode) uint64 {
	t.Helper()
	v := &structs.Volume{ID: id, Name: "vol " + id, ExternalID: "ext-" + id, PluginID: nsPluginID,
		AccessMode: mode, AttachmentMode: structs.AttachmentModeFilesystem}
	reg, err := client(via).RegisterVolumes(nsTestCtx(t, 30*time.Second), v)
	if err != nil {
		t.Fatalf("register %s via %s: exp: no error got: %v", id, via, err)
	}
	return reg.Index
}

func nsAuditCount(t *testing.T, path, method, vol string) int {
	t.Helper()
	entries, err := hostdir.ReadAudit(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read audit %s: %v", path, err)
	}
	n := 0
	for _, e := range entries {
		if e.Method == method && e.Volume == vol && e.Result == "ok" {
			n++
		}
	}
	return n
}

func nsOther(servers []string, not ...string) string {
	for _, s := range servers {
		if !slices.Contains(not, s) {
			return s
		}
	}
	return ""
}

// TestNetns_ClusterFormsAndFaultsWork brings the process cluster up in its
// namespaces, runs an allocation with a volume through a real agent and
// plugins, and uses every fault method once, checking that each has the
// effect the chaos suite relies on.
func TestNetns_ClusterFormsAndFaultsWork(t *testing.T) {
	begin := time.Now()
	step := func(name string) func() {
		start := time.Now()
		return func() { t.Logf("step %-28s %6.2fs", name, time.Since(start).Seconds()) }
	}
	done := step("start")
	c := NewNetns(t, nsTestOptions()).(*netnsCluster)
	servers := c.Servers()
	client := nsClients(c)
	leader := nsWaitAgree(t, c)
	done()

	// A volume claimed and mounted by the agent of w1, through the API
	// from the workload namespace.
	done = step("alloc runs")
	w1 := c.Workers()[0]
	nsRegister(t, client, leader, "smoke-v1", structs.AccessModeSingleNodeWriter)
	alloc := &structs.Alloc{ID: "smoke-a1", NodeID: w1.NodeID,
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "smoke-v1"}}}
	if _, err := client(leader).PlaceAllocs(nsTestCtx(t, 30*time.Second), alloc); err != nil {
		t.Fatalf("place alloc: %v", err)
	}
	nsWaitFor(t, "alloc running", func() error {
		a, _, err := client(leader).Alloc(nsTestCtx(t, 10*time.Second), "smoke-a1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("alloc status exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	if n := nsAuditCount(t, w1.NodeAudit, "NodePublishVolume", "ext-smoke-v1"); n != 1 {
		t.Fatalf("NodePublishVolume of ext-smoke-v1 on w1 exp: 1 got: %d", n)
	}
	if n := nsAuditCount(t, c.ControllerAudit(), "ControllerPublishVolume", "ext-smoke-v1"); n != 1 {
		t.Fatalf("ControllerPublishVolume of ext-smoke-v1 exp: 1 got: %d", n)
	}
	done()

	// Isolate the leader: the other two elect one of themselves and take
	// writes; after Heal everyone follows one leader again.
	done = step("isolate leader")
	if err := c.Isolate(leader); err != nil {
		t.Fatal(err)
	}
	newLeader := nsWaitNewLeader(t, c, leader)
	nsRegister(t, client, newLeader, "smoke-v2", structs.AccessModeMultiNodeReader)
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	leader = nsWaitAgree(t, c)
	done()

	// Bridge and one-way SYN drop: the cluster keeps taking writes.
	done = step("bridge + drop SYN")
	others := []string{nsOther(servers, leader), nsOther(servers, leader, nsOther(servers, leader))}
	if err := c.Bridge(others[0], leader, others[1]); err != nil {
		t.Fatal(err)
	}
	nsRegister(t, client, leader, "smoke-v3", structs.AccessModeMultiNodeReader)
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := c.DropSYN(leader, others[0]); err != nil {
		t.Fatal(err)
	}
	nsRegister(t, client, leader, "smoke-v4", structs.AccessModeMultiNodeReader)
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	leader = nsWaitAgree(t, c)
	done()

	// Latency: a write commits only after a follower's answer crossed a
	// proxy both ways, so it takes at least twice the added delay.
	done = step("latency")
	const delay = 100 * time.Millisecond
	if err := c.SetLatency(delay); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nsRegister(t, client, leader, "smoke-v5", structs.AccessModeMultiNodeReader)
	if took := time.Since(start); took < 2*delay {
		t.Fatalf("write with %s server latency exp: >= %s got: %s", delay, 2*delay, took)
	}
	if err := c.Heal(); err != nil { // also removes the latency
		t.Fatal(err)
	}
	done()

	// Kill -9 a follower, write while it is down, restart it on its data
	// dir: it catches up to the same state at the same index.
	done = step("kill + restart follower")
	victim := nsOther(servers, leader)
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	idx := nsRegister(t, client, leader, "smoke-v6", structs.AccessModeMultiNodeReader)
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	d := nsWaitDigests(t, c, idx)
	t.Logf("digests equal at index %d: %s… (%d bytes)", d.AppliedIndex, d.SHA256[:16], d.Bytes)
	done()

	// SIGSTOP the leader past the election timeout: the others elect a
	// new one; after SIGCONT the old leader follows it.
	done = step("pause + resume leader")
	if err := c.Pause(leader); err != nil {
		t.Fatal(err)
	}
	newLeader = nsWaitNewLeader(t, c, leader)
	nsRegister(t, client, newLeader, "smoke-v7", structs.AccessModeMultiNodeReader)
	if err := c.Resume(leader); err != nil {
		t.Fatal(err)
	}
	leader = nsWaitAgree(t, c)
	done()

	// Kill the node plugin of w1: its agent reports it unhealthy; after a
	// restart it is healthy again.
	done = step("kill + restart plugin")
	pluginHealth := func(want int) func() error {
		return func() error {
			p, _, err := client(leader).Plugin(nsTestCtx(t, 10*time.Second), nsPluginID, structs.QueryOptions{})
			if err != nil {
				return err
			}
			if p.NodesHealthy != want {
				return fmt.Errorf("healthy node plugins exp: %d got: %d", want, p.NodesHealthy)
			}
			return nil
		}
	}
	if err := c.KillPlugin(w1.Name); err != nil {
		t.Fatal(err)
	}
	nsWaitFor(t, "node plugin unhealthy", pluginHealth(len(c.Workers())-1))
	if err := c.RestartPlugin(w1.Name); err != nil {
		t.Fatal(err)
	}
	nsWaitFor(t, "node plugin healthy", pluginHealth(len(c.Workers())))
	done()

	// Cut w2 off from every server: its node goes down after the
	// heartbeat TTL; after Heal it heartbeats again and is ready.
	done = step("isolate worker")
	w2 := c.Workers()[1]
	nodeStatus := func(want structs.NodeStatus) func() error {
		return func() error {
			n, _, err := client(leader).Node(nsTestCtx(t, 10*time.Second), w2.NodeID, structs.QueryOptions{})
			if err != nil {
				return err
			}
			if n.Status != want {
				return fmt.Errorf("node %s status exp: %s got: %s", w2.Name, want, n.Status)
			}
			return nil
		}
	}
	if err := c.IsolateWorker(w2.Name); err != nil {
		t.Fatal(err)
	}
	nsWaitFor(t, "isolated node down", nodeStatus(structs.NodeStatusDown))
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	nsWaitFor(t, "node ready again", nodeStatus(structs.NodeStatusReady))
	done()

	// Stop the allocation: the servers drive node then controller detach
	// and free the claim.
	done = step("release")
	if _, err := client(leader).StopAllocs(nsTestCtx(t, 30*time.Second), "smoke-a1"); err != nil {
		t.Fatal(err)
	}
	nsWaitFor(t, "volume freed", func() error {
		ctx := nsTestCtx(t, 10*time.Second)
		v, _, err := client(leader).Volume(ctx, "smoke-v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n := len(v.PastClaims) + len(v.ReadClaims) + len(v.WriteClaims); n > 0 {
			return fmt.Errorf("claims on smoke-v1 exp: 0 got: %d", n)
		}
		evals, _, err := client(leader).Evals(ctx, structs.EvalStatusPending, "smoke-v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(evals) > 0 {
			return fmt.Errorf("pending evals exp: 0 got: %d", len(evals))
		}
		return nil
	})
	if n := nsAuditCount(t, w1.NodeAudit, "NodeUnstageVolume", "ext-smoke-v1"); n != 1 {
		t.Fatalf("NodeUnstageVolume of ext-smoke-v1 on w1 exp: 1 got: %d", n)
	}
	if n := nsAuditCount(t, c.ControllerAudit(), "ControllerUnpublishVolume", "ext-smoke-v1"); n != 1 {
		t.Fatalf("ControllerUnpublishVolume of ext-smoke-v1 exp: 1 got: %d", n)
	}
	done()

	done = step("final checks")
	nsWaitDigests(t, c, 0)
	if err := c.Health(); err != nil {
		t.Fatalf("health exp: nil got: %v", err)
	}
	nsCheckSecured(t, c)
	dir := t.TempDir()
	if err := c.SaveLogs(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"s1.log", "w1-agent.log", "w1-plugin.log", "ctrl-plugin-audit.jsonl", "cluster.txt"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("saved %s exp: a non-empty file got: %v", f, err)
		}
	}
	done()
	t.Logf("smoke test took %.1fs", time.Since(begin).Seconds())
}

// TestNetns_HealthReportsCrash checks the crash scan of Health without a
// cluster: a Go panic at the start of a line is found with its line number,
// the word "panic:" inside a log line is not.
func TestNetns_HealthReportsCrash(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "s1.log")
	content := "2025-01-01T00:00:00.000Z [INFO]  claimd.server: no panic: here, mid-line\n" +
		"panic: runtime error: index out of range [3] with length 3\n\ngoroutine 1 [running]:\nmain.main()\n"
	if err := os.WriteFile(log, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	err := nsScanCrash(log)
	if err == nil || !strings.Contains(err.Error(), "index out of range") || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("crash scan exp: the panic at line 2 got: %v", err)
	}
	if err := os.WriteFile(log, []byte("[INFO] recovered from panic: in a handler\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := nsScanCrash(log); err != nil {
		t.Fatalf("crash scan of a clean log exp: nil got: %v", err)
	}
}

// TestChaos_Netns runs the chaos schedule on real processes in network
// namespaces: the short schedule (every nemesis once) by default, a long
// one with -chaos.duration=30m; -chaos.seed replays a schedule. It needs
// root and nft (skips without, fails with CLAIMD_NETLAB_REQUIRED set). Like
// TestChaos_InProcess it skips in -short mode; TestNetns_ClusterFormsAndFaultsWork
// keeps the backend itself covered there.
func TestChaos_Netns(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	c := NewNetns(t, nsTestOptions()).(*netnsCluster)
	Run(t, c, Options{Duration: *FlagDuration, Seed: *FlagSeed})
	nsCheckSecured(t, c)
}

// TestChaos_NetnsWAL is TestChaos_Netns with every server's Raft log in
// raft-wal (decision 34): the schedule whose kill-leader fault left a
// server unable to start on raft-wal v0.4.0.
func TestChaos_NetnsWAL(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	opts := nsTestOptions()
	opts.ServerArgs = append(opts.ServerArgs, "-raft-log-store", "wal")
	c := NewNetns(t, opts).(*netnsCluster)
	Run(t, c, Options{Duration: *FlagDuration, Seed: *FlagSeed})
	nsCheckSecured(t, c)
	for _, name := range c.names {
		if _, err := os.Stat(filepath.Join(c.dataDir, name, "raft", "wal")); err != nil {
			t.Errorf("server %s exp: its Raft log in raft-wal got: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(c.dataDir, name, "raft", "raft.db")); err == nil {
			t.Errorf("server %s exp: no boltdb log got: raft.db", name)
		}
	}
}

// flagNetnsInsecure runs the network-namespace tests in plaintext with
// ACLs off, to compare a failure or a run time with the secured default.
var flagNetnsInsecure = flag.Bool("chaos.netns-insecure", false, "run the network-namespace cluster without TLS and ACLs (default: mutual TLS and ACLs on)")

// nsTestOptions are the backend options the flags ask for.
func nsTestOptions() NetnsOptions {
	return NetnsOptions{Insecure: *flagNetnsInsecure}
}

// nsCheckSecured fails the test unless the cluster ran with mutual TLS and
// ACLs (see CheckSecured), and logs the servers' security counters.
func nsCheckSecured(t *testing.T, c *netnsCluster) {
	t.Helper()
	if c.opts.Insecure {
		t.Logf("netns: ran in plaintext with ACLs off (-chaos.netns-insecure)")
		return
	}
	t.Logf("netns: security counters since each server's last start:\n%s", c.SecurityCounters())
	if err := c.CheckSecured(); err != nil {
		t.Errorf("netns: cluster not secured as required:\n%v", err)
		return
	}
	t.Logf("netns: secured: every server started with tls=true acl=true; no call was refused for lack of permission but by a server " +
		"whose state was behind (logged above); plaintext, certificate-less and token-less calls are refused; the workload token is held to its policy")
}

// TestNetns_SecurityLogParsing checks, without a cluster, how CheckSecured
// reads server logs: the security settings of "server started" (text and
// JSON lines) and the node and remote of a node-secret refusal.
func TestNetns_SecurityLogParsing(t *testing.T) {
	text := `2026-12-04T15:09:18.285Z [INFO]  claimd.server: server started: id=730825dc name=s3 addr=10.213.7.12:4648 bootstrap_expect=3 had_state=false tls=true tls_allow_plaintext=false acl=true`
	if got, exp := nsStartOf(text), (nsStart{tls: "true", plaintext: "false", acl: "true"}); got != exp {
		t.Fatalf("text line exp: %+v got: %+v", exp, got)
	}
	js := `{"@level":"info","@message":"server started","tls":false,"tls_allow_plaintext":false,"acl":true}`
	if got, exp := nsStartOf(js), (nsStart{tls: "false", plaintext: "false", acl: "true"}); got != exp {
		t.Fatalf("JSON line exp: %+v got: %+v", exp, got)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "s2.log")
	content := "=== netns: start 1 of s2 in s2 at 2026-12-04T15:16:29.71846952Z\n" +
		`2026-12-04T15:16:30.000Z [WARN]  claimd.server: permission denied: method=Volume.List reason="ACL token not found" remote=10.213.7.16:1` + "\n" +
		"=== netns: start 2 of s2 in s2 at 2026-12-04T15:16:34.689671656Z\n" + text + "\n" +
		`2026-12-04T15:16:34.730Z [WARN]  claimd.server: permission denied: method=Status.StateDigest reason="ACL token not found" remote=10.213.7.16:60172` + "\n"
	if err := os.WriteFile(log, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	starts, denied, err := nsScanSecurity(log)
	if err != nil || len(starts) != 1 || len(denied) != 2 {
		t.Fatalf("scan exp: 1 start and 2 refusals got: %v %v %v", starts, denied, err)
	}
	if d := denied[0]; d.restarted || d.sinceStart < 0 {
		t.Fatalf("refusal after the first start exp: not restarted, a time got: %+v", d)
	}
	if d := denied[1]; !d.restarted || d.sinceStart < 40*time.Millisecond || d.sinceStart > 41*time.Millisecond {
		t.Fatalf("refusal after the restart exp: restarted, 40ms after it got: %+v", d)
	}
	for _, line := range []string{
		`2026-12-04T15:09:35.933Z [WARN]  claimd.server: permission denied: method=Alloc.List reason="the token does not grant alloc:read and is not node \"3268cf49-2bee\"'s secret" remote=10.213.7.14:46468`,
		`{"@level":"warn","@message":"permission denied","method":"Alloc.List","reason":"the token does not grant alloc:read and is not node \"3268cf49-2bee\"'s secret","remote":"10.213.7.14:46468"}`,
	} {
		m, r := nsDeniedNode.FindStringSubmatch(line), nsDeniedRemote.FindStringSubmatch(line)
		if m == nil || r == nil || m[1] != "3268cf49-2bee" || r[1] != "10.213.7.14" {
			t.Fatalf("refusal of %s exp: node 3268cf49-2bee from 10.213.7.14 got: %q %q", line, m, r)
		}
	}
}
