package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// upgradeFrom is the earlier build the rolling upgrade starts from: the
// last commit before a volume's evals moved into its row (decision 41), so
// the upgrade crosses a change of the state machine's storage, the
// snapshot's record order and a new field of a log entry.
const upgradeFrom = "55ad4e419b23b39ee90440c0a55a97338e61aa5e"

// buildAt builds cmd/claimd as git holds it at commit, or skips the test
// when this checkout does not have that commit (a shallow clone).
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s is not in this checkout (%v): the upgrade test needs the project's history", commit[:12], err)
	}
	src := t.TempDir()
	// git archive | tar -x, through a shell: the source exactly as
	// committed, without this checkout's changes or build outputs.
	unpack := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := unpack.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit[:12], err, out)
	}
	bin := filepath.Join(t.TempDir(), "claimd-"+commit[:12])
	// -trimpath: without it the compiled packages record the temporary
	// source directory, a new one on every run, so the Go build cache
	// never matched and each run compiled the old commit from scratch
	// (12-25 s of each upgrade test with -race load on 2 cores). With it
	// the same commit is the same build, and a later run links from the
	// cache (about 1.5 s). The binary is the same program; only the
	// file names in its stack traces are module-relative.
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/claimd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	began := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", commit[:12], err, out)
	}
	t.Logf("built %s in %s", commit[:7], time.Since(began).Round(time.Millisecond))
	return bin
}

// bootstrapACL bootstraps the ACL system of the cluster at addrs (mutual
// TLS with tlsConf, no token yet), retrying until a leader answers, and
// returns the management token's secret.
func bootstrapACL(t *testing.T, addrs []string, tlsConf *tls.Config) string {
	t.Helper()
	anon, err := api.NewClient(api.Config{Addresses: addrs, TLS: tlsConf, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	var token string
	harness.WaitFor(t, 60*time.Second, func() error {
		tok, err := anon.ACLBootstrap(harness.Ctx(t, 15*time.Second))
		if err != nil {
			return err
		}
		token = tok.SecretID
		return nil
	})
	return token
}

// TestUpgrade_RollingFromEarlierBuild (issue 29): a secured three-server
// cluster and a client agent of an earlier build run a claim workload
// (allocations placed and stopped, each claim mounted and released by the
// real agent and plugin) while the servers are replaced one at a time with
// this build, followers first and the leader last, and then the agent. No
// acknowledged placement or stop is lost, every stopped allocation's claim
// is freed and every running one holds its claim, and the Raft term rises
// at most once per replaced server.
func TestUpgrade_RollingFromEarlierBuild(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	old := buildAt(t, upgradeFrom)
	dir := t.TempDir()

	pkiDir := filepath.Join(dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	tlsCLI := func(args ...string) {
		cmd := exec.Command(old, args...)
		cmd.Dir = pkiDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("claimd %v: %v\n%s", args, err, out)
		}
	}
	tlsCLI("tls", "ca", "create")
	for range 3 {
		tlsCLI("tls", "cert", "create", "-server", "-additional-ipaddress", "127.0.0.1")
	}
	tlsCLI("tls", "cert", "create", "-client")
	tlsCLI("tls", "cert", "create", "-cli")
	pki := func(f string) string { return filepath.Join(pkiDir, f) }
	ca := pki("claimd-agent-ca.pem")

	addrs := []string{harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)}
	servers := map[string]*harness.Process{}
	for i, suffix := range []string{"", "-1", "-2"} {
		name := fmt.Sprintf("s%d", i+1)
		servers[addrs[i]] = harness.StartProcessWith(t, old, name, "agent", "-server", "-bootstrap-expect", "3",
			"-data-dir", filepath.Join(dir, name), "-bind", addrs[i], "-join", harness.JoinOthers(addrs, i),
			"-node-name", name, "-raft-multiplier", "0.2",
			"-tls-ca-file", ca, "-tls-cert-file", pki("global-server-claimd"+suffix+".pem"),
			"-tls-key-file", pki("global-server-claimd"+suffix+"-key.pem"), "-acl-enabled")
	}

	tlsConf, err := tlsutil.ClientConfigFromFiles(ca, pki("global-cli-claimd.pem"), pki("global-cli-claimd-key.pem"), "")
	if err != nil {
		t.Fatal(err)
	}
	mgmtToken := bootstrapACL(t, addrs, tlsConf)
	c, err := api.NewClient(api.Config{Addresses: addrs, TLS: tlsConf, Token: mgmtToken, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	sockDir, err := os.MkdirTemp("", "claimd-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "hostdir.sock")
	harness.StartProcessWith(t, old, "plugin", "csi-plugin", "hostdir", "-endpoint", "unix://"+sock,
		"-root", filepath.Join(dir, "volumes"), "-node-id", "worker1", "-mode", "monolith", "-auto-create")
	client := harness.StartProcessWith(t, old, "client", "agent", "-client", "-servers", strings.Join(addrs, ","),
		"-data-dir", filepath.Join(dir, "client"), "-node-name", "worker1", "-log-level", "debug",
		"-csi-plugin", "id=hostdir,type=monolith,socket="+sock,
		"-tls-ca-file", ca, "-tls-cert-file", pki("global-client-claimd.pem"), "-tls-key-file", pki("global-client-claimd-key.pem"))

	var nodeID string
	harness.WaitFor(t, 60*time.Second, func() error {
		nodes, _, err := c.Nodes(harness.Ctx(t, 15*time.Second), structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(nodes) != 1 || nodes[0].Status != structs.NodeStatusReady {
			return fmt.Errorf("exp: worker1 ready got: %+v", nodes)
		}
		nodeID = nodes[0].ID
		return nil
	})
	const nVols = 6
	var vols []*structs.Volume
	for i := range nVols {
		id := fmt.Sprintf("up%d", i)
		vols = append(vols, &structs.Volume{ID: id, ExternalID: id, PluginID: "hostdir",
			AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem})
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		_, err := c.RegisterVolumes(harness.Ctx(t, 15*time.Second), vols...)
		return err
	})

	term := func() uint64 {
		var got uint64
		harness.WaitFor(t, 60*time.Second, func() error {
			h, err := c.RaftHealth(harness.Ctx(t, 15*time.Second))
			if err != nil {
				return err
			}
			if !h.Healthy || len(h.Servers) != 3 {
				return fmt.Errorf("raft health exp: 3 healthy servers got: %+v", h)
			}
			got = h.Servers[0].LastTerm // the leader's, first
			return nil
		})
		return got
	}
	startTerm := term()

	// The workload: volume by volume, place an allocation, wait for it to
	// run (the agent claimed and mounted), stop it, and go on; every call
	// the servers acknowledged is recorded. Refusals while a server is
	// away are retried; only acknowledged calls count.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := map[string]bool{}  // acknowledged placements
	stopped := map[string]bool{} // acknowledged stops
	// The placement in flight when the workload was told to stop: the
	// servers may have committed it though its caller saw only the
	// cancellation, so it is looked up and stopped like the others.
	var unacked string
	cycles := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ctx.Err() == nil && n < 200; n++ {
			id := fmt.Sprintf("a%03d", n)
			vol := fmt.Sprintf("up%d", n%nVols)
			call := func(f func(context.Context) error) bool {
				for ctx.Err() == nil {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := f(cctx)
					cancel()
					if err == nil {
						return true
					}
					time.Sleep(100 * time.Millisecond)
				}
				return false
			}
			if !call(func(cctx context.Context) error {
				_, err := c.PlaceAllocs(cctx, &structs.Alloc{ID: id, NodeID: nodeID,
					Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}})
				return err
			}) {
				mu.Lock()
				unacked = id
				mu.Unlock()
				return
			}
			mu.Lock()
			placed[id] = true
			mu.Unlock()
			// Running, or a claim refused while the volume's last release
			// finishes: either way the allocation is stopped next.
			deadline := time.Now().Add(20 * time.Second)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				a, _, err := c.Alloc(cctx, id, structs.QueryOptions{})
				cancel()
				if err == nil && a != nil && (a.ClientStatus == structs.AllocClientRunning || a.ClientStatus == structs.AllocClientFailed) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !call(func(cctx context.Context) error { _, err := c.StopAllocs(cctx, id); return err }) {
				return
			}
			mu.Lock()
			stopped[id] = true
			cycles++
			mu.Unlock()
		}
	}()
	waitCycles := func(n int) {
		t.Helper()
		mu.Lock()
		target := cycles + n
		mu.Unlock()
		harness.WaitFor(t, 90*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if cycles < target {
				return fmt.Errorf("workload exp: %d cycles got: %d", target, cycles)
			}
			return nil
		})
	}
	waitCycles(3)

	// Replace the servers, followers first, the leader last.
	leaderAddr := func() string {
		var addr string
		harness.WaitFor(t, 60*time.Second, func() error {
			conf, err := c.RaftConfiguration(harness.Ctx(t, 15*time.Second), false)
			if err != nil {
				return err
			}
			for _, s := range conf.Servers {
				if s.Leader {
					addr = s.Address
					return nil
				}
			}
			return fmt.Errorf("no leader in %+v", conf.Servers)
		})
		return addr
	}
	leader := leaderAddr()
	order := []string{}
	for _, a := range addrs {
		if a != leader {
			order = append(order, a)
		}
	}
	order = append(order, leader)
	for i, a := range order {
		if err := servers[a].Replace("", 30*time.Second); err != nil {
			t.Logf("replacing %s: %v", servers[a].Name, err)
		}
		term() // healthy again, all three
		if i == len(order)-1 {
			// The upgrade's one operator step (issue 38): this build
			// sends controller calls only to admitted controllers, and
			// the agent's registrations from before admissions existed
			// admitted none. Once every server runs this build (an
			// older server cannot apply an admission), admit it.
			harness.WaitFor(t, 60*time.Second, func() error {
				_, err := c.AdmitController(harness.Ctx(t, 15*time.Second), "hostdir", nodeID)
				return err
			})
		}
		waitCycles(2)
	}
	// Every server now reports this build.
	conf, err := c.RaftConfiguration(harness.Ctx(t, 15*time.Second), false)
	if err != nil {
		t.Fatal(err)
	}
	self := harness.RunCLI(t, "version", "-json")
	for _, s := range conf.Servers {
		if s.Version == "" || !strings.Contains(self.Stdout, strings.Fields(s.Version)[0]) {
			t.Errorf("server %s exp: this build's version got: %q (this build: %s)", s.Address, s.Version, self.Stdout)
		}
	}
	endTerm := term()
	if endTerm-startTerm > uint64(len(order)) {
		t.Errorf("Raft term exp: at most one election per replaced server (%d) got: %d -> %d", len(order), startTerm, endTerm)
	}

	// Then the client agent.
	if err := client.Replace("", 30*time.Second); err != nil {
		t.Logf("replacing the client agent: %v", err)
	}
	waitCycles(3)
	stop()
	wg.Wait()

	// Nothing acknowledged is lost, nothing is stuck: every placed
	// allocation exists, and once the last one (placed when the workload
	// stopped) is stopped too, every claim is freed.
	mu.Lock()
	defer mu.Unlock()
	if unacked != "" {
		if a, _, err := c.Alloc(harness.Ctx(t, 15*time.Second), unacked, structs.QueryOptions{}); err == nil && a != nil {
			t.Logf("placement of %s was committed though its caller was cancelled; stopping it too", unacked)
			placed[unacked] = true
		}
	}
	for id := range placed {
		if !stopped[id] {
			harness.WaitFor(t, 30*time.Second, func() error {
				_, err := c.StopAllocs(harness.Ctx(t, 10*time.Second), id)
				return err
			})
			stopped[id] = true
		}
	}
	if cycles < 12 {
		t.Fatalf("workload exp: at least 12 cycles through the upgrade got: %d", cycles)
	}
	// A claim left held is described once the wait has failed (not on
	// every poll): with its allocation as the leader and as each server
	// sees it, since the client agent watches one of them. A client that
	// missed the stop, a release that did not run and a server that
	// stopped applying read differently.
	var held []*structs.Claim
	defer func() {
		if t.Failed() && len(held) > 0 {
			t.Logf("claims left held: %s", describeAllocs(t, c, addrs, api.Config{TLS: tlsConf, Token: mgmtToken}, held))
		}
	}()
	harness.WaitFor(t, 90*time.Second, func() error {
		held = nil
		for id := range placed {
			a, _, err := c.Alloc(harness.Ctx(t, 15*time.Second), id, structs.QueryOptions{})
			if err != nil || a == nil {
				return fmt.Errorf("acknowledged allocation %s exp: kept got: %v (%v)", id, a, err)
			}
			if stopped[id] && a.DesiredStatus != structs.AllocDesiredStop {
				return fmt.Errorf("acknowledged stop of %s exp: kept got: desired %s", id, a.DesiredStatus)
			}
		}
		for _, v := range vols {
			got, _, err := c.Volume(harness.Ctx(t, 15*time.Second), v.ID, structs.QueryOptions{})
			if err != nil {
				return err
			}
			if all := got.AllClaims(); len(all) != 0 {
				held = all
				return fmt.Errorf("volume %s exp: every claim freed (all its allocations stopped) got: %s", v.ID, describeClaims(all))
			}
		}
		return nil
	})
	t.Logf("%d claim cycles through the upgrade; Raft term %d -> %d", cycles, startTerm, endTerm)
}

func describeClaims(cs []*structs.Claim) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s of %s on %s (%s)", c.Mode, c.AllocID, c.NodeID, c.State))
	}
	return strings.Join(parts, ", ")
}

// describeAllocs says how the leader, and each server from its own state,
// sees the allocation of each claim.
func describeAllocs(t *testing.T, c *api.Client, addrs []string, cfg api.Config, claims []*structs.Claim) string {
	var out []string
	for _, cl := range claims {
		if a, _, err := c.Alloc(harness.Ctx(t, 15*time.Second), cl.AllocID, structs.QueryOptions{}); err == nil && a != nil {
			out = append(out, fmt.Sprintf("%s at the leader: desired %s, client %s (%s)", a.ID, a.DesiredStatus, a.ClientStatus, a.ClientDescription))
		}
		for _, addr := range addrs {
			one := cfg
			one.Addresses, one.Timeout = []string{addr}, 5*time.Second
			oc, err := api.NewClient(one)
			if err != nil {
				continue
			}
			a, meta, err := oc.Alloc(harness.Ctx(t, 5*time.Second), cl.AllocID, structs.QueryOptions{AllowStale: true})
			oc.Close()
			if err == nil && a != nil {
				out = append(out, fmt.Sprintf("%s at %s (index %d): desired %s, client %s", a.ID, addr, meta.Index, a.DesiredStatus, a.ClientStatus))
			}
		}
	}
	return strings.Join(out, "; ")
}
