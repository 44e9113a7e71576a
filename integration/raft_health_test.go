package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
	"github.com/claimd/claimd/version"
)

// Autopilot at test pace: stats every 250 ms, a removal round every
// 500 ms. The health thresholds keep their defaults (scaled by the
// harness's Raft multiplier: last contact 1 s).
const (
	apUpdate    = 250 * time.Millisecond
	apReconcile = 500 * time.Millisecond
)

func withAutopilot(ap server.AutopilotConfig) func(*server.Config) {
	ap.UpdateInterval, ap.ReconcileInterval = apUpdate, apReconcile
	return func(cfg *server.Config) { cfg.Autopilot = ap }
}

// raftHealth reads the leader's health view through s (forwarded when s
// follows).
func raftHealth(t *testing.T, s *harness.TestServer) (*structs.RaftHealthResponse, error) {
	t.Helper()
	return s.Client().RaftHealth(harness.Ctx(t, 15*time.Second))
}

// serverHealth finds one server in a health view.
func serverHealth(h *structs.RaftHealthResponse, id string) (structs.RaftServerHealth, bool) {
	for _, s := range h.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return structs.RaftServerHealth{}, false
}

// waitAllHealthy polls through via until n servers are all healthy.
func waitAllHealthy(t *testing.T, via *harness.TestServer, n int) *structs.RaftHealthResponse {
	t.Helper()
	var h *structs.RaftHealthResponse
	harness.WaitFor(t, applyWait, func() error {
		var err error
		if h, err = raftHealth(t, via); err != nil {
			return err
		}
		if !h.Healthy || len(h.Servers) != n {
			return fmt.Errorf("health via %s exp: %d servers, all healthy got: %+v", via.Name, n, h)
		}
		return nil
	})
	return h
}

// configIDs is the Raft configuration as the leader holds it.
func configIDs(t *testing.T, via *harness.TestServer) (map[string]bool, error) {
	t.Helper()
	conf, err := via.Client().RaftConfiguration(harness.Ctx(t, 15*time.Second), false)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, s := range conf.Servers {
		ids[s.ID] = true
	}
	return ids, nil
}

// TestRaftHealth_StoppedFollowerTurnsUnhealthyWithGrowingLastContact: in a
// secured three-server cluster every server is healthy (seen through the
// leader, a follower and the CLI); a stopped follower turns unhealthy with
// a last contact that keeps growing while the others stay healthy, and
// turns healthy again when it is back.
func TestRaftHealth_StoppedFollowerTurnsUnhealthyWithGrowingLastContact(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{Configure: withAutopilot(server.AutopilotConfig{})})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	followers := c.Followers()

	h := waitAllHealthy(t, leader, 3)
	waitAllHealthy(t, followers[0], 3)
	if h.FailureTolerance != 1 || h.LeaderID == "" || !h.Servers[0].Leader || time.Duration(h.LastContactThreshold) != time.Second {
		t.Fatalf("health of three healthy servers exp: tolerance 1, leader first, threshold 1s got: %+v", h)
	}
	for _, s := range h.Servers {
		if !s.Voter || s.Status != structs.RaftServerAlive || s.Name == "" || s.LastTerm == 0 {
			t.Errorf("server %s exp: voter, alive, named, with a term got: %+v", s.ID, s)
		}
		// Each server's build, as it answered the leader (issue 29: a
		// rolling upgrade is watched here and in list-peers).
		if s.Version != version.Short() {
			t.Errorf("server %s exp: version %q got: %q", s.ID, version.Short(), s.Version)
		}
	}
	conf, err := leader.Client().RaftConfiguration(harness.Ctx(t, 15*time.Second), false)
	if err != nil || len(conf.Servers) != 3 {
		t.Fatalf("list peers exp: 3 servers got: %+v, %v", conf, err)
	}
	for _, s := range conf.Servers {
		if s.Version != version.Short() {
			t.Errorf("list-peers %s exp: version %q got: %q", s.ID, version.Short(), s.Version)
		}
	}
	_, err = leader.ClientWithToken("").RaftHealth(harness.Ctx(t, 15*time.Second))
	if !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("raft health without operator:read exp: permission_denied got: %v", err)
	}
	t.Run("CLI", func(t *testing.T) { checkRaftHealthCLI(t, c, followers[0]) })

	victim := followers[1]
	victimID := victim.Server().ID()
	victim.Stop()
	var first structs.HumanDuration
	harness.WaitFor(t, applyWait, func() error {
		h, err := raftHealth(t, leader)
		if err != nil {
			return err
		}
		if h.Healthy || h.FailureTolerance != 0 || len(h.Servers) != 3 {
			return fmt.Errorf("health with a follower down exp: unhealthy, tolerance 0, 3 servers got: %+v", h)
		}
		for _, s := range h.Servers {
			switch {
			case s.ID == victimID && (s.Healthy || s.LastContact <= h.LastContactThreshold || s.Status != structs.RaftServerUnreachable):
				return fmt.Errorf("stopped follower exp: unhealthy, last contact > %s, unreachable (not yet failed: not past the dead-server threshold) got: %+v",
					h.LastContactThreshold, s)
			case s.ID != victimID && !s.Healthy:
				return fmt.Errorf("running server %s exp: healthy got: %+v", s.ID, s)
			}
		}
		v, _ := serverHealth(h, victimID)
		first = v.LastContact
		return nil
	})
	harness.WaitFor(t, applyWait, func() error {
		h, err := raftHealth(t, leader)
		if err != nil {
			return err
		}
		if v, ok := serverHealth(h, victimID); !ok || v.LastContact <= first || v.Healthy {
			return fmt.Errorf("stopped follower's last contact exp: growing past %s, unhealthy got: %+v", first, v)
		}
		return nil
	})
	// The CLI says so, and exits 2 for scripts that wait on it (issue 30).
	r := harness.RunCLI(t, raftHealthCLI(c, leader)...)
	if r.Code != 2 || !strings.Contains(r.Stdout, "Healthy: false") || !strings.Contains(r.Stdout, structs.RaftServerUnreachable) {
		t.Fatalf("raft health with a follower down exp: exit 2, Healthy: false, the follower unreachable got: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := harness.RunCLI(t, append(raftHealthCLI(c, leader), "-json")...); r.Code != 2 || !strings.Contains(r.Stdout, `"healthy": false`) {
		t.Fatalf("raft health -json with a follower down exp: exit 2 got: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	victim.Start()
	waitAllHealthy(t, leader, 3)
}

// raftHealthCLI is `claimd operator raft health` through via, secured.
func raftHealthCLI(c *harness.Cluster, via *harness.TestServer) []string {
	pki := c.PKI()
	return []string{"operator", "raft", "health", "-address", via.Addr, "-ca-cert", pki.CAFile,
		"-client-cert", pki.CertFile[tlsutil.RoleCLI], "-client-key", pki.KeyFile[tlsutil.RoleCLI],
		"-token", c.ManagementToken(), "-timeout", "20s"}
}

// checkRaftHealthCLI runs the real binary through a follower: the table
// has a header and one row per server, leader first; -json has the API's
// field names.
func checkRaftHealthCLI(t *testing.T, c *harness.Cluster, via *harness.TestServer) {
	args := raftHealthCLI(c, via)
	r := harness.RunCLI(t, args...)
	if r.Code != 0 {
		t.Fatalf("claimd operator raft health exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	// Healthy means every server answered the leader, and with its answer
	// said which entry features it applies: all of this build's.
	if len(lines) != 8 || !strings.HasPrefix(lines[0], "Node") || !strings.Contains(lines[0], "Last Contact") ||
		!strings.Contains(lines[0], "Index Lag") || lines[5] != "Healthy: true (failure tolerance 1)" ||
		lines[6] != "Entry features every server applies: holder-detached" ||
		!strings.HasPrefix(lines[7], "Thresholds: last contact 1s, index lag 1024; dead-server cleanup off") {
		t.Fatalf("table exp: header, 3 rows, blank, verdict, entry features, thresholds got:\n%s", r.Stdout)
	}
	for i, l := range lines[1:4] {
		f := strings.Fields(l)
		state := "follower"
		if i == 0 {
			state = "leader"
		}
		// The version, last, may hold spaces ("dev (3f2a9c1b7d4e)").
		if len(f) < 11 || f[3] != state || f[5] != "alive" || f[6] != "true" || !strings.HasPrefix(strings.Join(f[10:], " "), version.Short()) {
			t.Errorf("row %d exp: 11 columns, %s, alive, healthy, version %q got: %q", i+1, state, version.Short(), f)
		}
	}

	r = harness.RunCLI(t, append(args, "-json")...)
	if r.Code != 0 {
		t.Fatalf("claimd operator raft health -json exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &raw); err != nil {
		t.Fatalf("-json exp: a JSON object got: %v\n%s", err, r.Stdout)
	}
	servers, _ := raw["servers"].([]any)
	if raw["healthy"] != true || len(servers) != 3 || raw["last_contact_threshold"] != "1s" {
		t.Fatalf("-json exp: healthy, 3 servers, threshold \"1s\" got: %s", r.Stdout)
	}
	first, _ := servers[0].(map[string]any)
	for _, k := range []string{"id", "name", "address", "leader", "voter", "status", "healthy", "stable_since", "last_contact", "last_term", "last_index", "index_lag"} {
		if _, ok := first[k]; !ok {
			t.Errorf("-json server exp: key %q got: %v", k, first)
		}
	}
}

// TestRaftHealth_CleanupRemovesDeadServersWhileQuorumStays: with cleanup
// on, servers unreachable past the threshold are removed, never before it,
// and the cluster keeps committing. Autopilot's rule is to remove at most
// (voters-1)/2 failed voters at a time, so the healthy ones left are a
// majority of the configuration they were removed from: two of five, then
// one of three (leaving two voters, both up).
func TestRaftHealth_CleanupRemovesDeadServersWhileQuorumStays(t *testing.T) {
	const deadAfter = 2 * time.Second
	c := harness.NewCluster(t, 5, harness.Options{Configure: withAutopilot(server.AutopilotConfig{
		CleanupDeadServers: true, DeadServerThreshold: deadAfter})})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	waitAllHealthy(t, leader, 5)

	removeDead := func(dead []*harness.TestServer, left int) {
		t.Helper()
		ids := map[string]bool{}
		for _, s := range dead {
			ids[s.Server().ID()] = true
		}
		stopped := time.Now()
		for _, s := range dead {
			s.Stop()
		}
		var leader *harness.TestServer
		harness.WaitFor(t, 60*time.Second, func() error {
			if leader = c.Leader(); leader == nil {
				return errors.New("leader exp: one got: none")
			}
			conf, err := configIDs(t, leader)
			if err != nil {
				return err
			}
			for id := range ids {
				if conf[id] {
					return fmt.Errorf("dead server %s exp: removed got: still in %v", id, conf)
				}
			}
			if len(conf) != left {
				return fmt.Errorf("configuration exp: %d servers got: %v", left, conf)
			}
			return nil
		})
		// A server is failed once unanswered for the threshold, counted
		// from its last answer: one update round (or a few, on a machine
		// too busy to keep the pace) before it stopped.
		if took := time.Since(stopped); took < deadAfter/2 {
			t.Fatalf("removal exp: not before %s unreachable got: after %s", deadAfter, took)
		}
		mustRegister(t, leader, fmt.Sprintf("after-removal-%d", left))
		waitAllHealthy(t, leader, left)
	}
	fs := c.Followers()
	removeDead(fs[:2], 3)
	var rest []*harness.TestServer
	for _, s := range c.Servers {
		if s.Running() && !s.IsLeader() {
			rest = append(rest, s)
		}
	}
	removeDead(rest[:1], 2)
}

// TestRaftHealth_CleanupKeepsMinQuorum: with MinQuorum 3 a three-server
// cluster keeps its failed server: the health view shows it failed, the
// configuration keeps it round after round, and the two others commit.
func TestRaftHealth_CleanupKeepsMinQuorum(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{Configure: withAutopilot(server.AutopilotConfig{
		CleanupDeadServers: true, DeadServerThreshold: time.Second, MinQuorum: 3})})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	waitAllHealthy(t, leader, 3)
	victim := c.Followers()[0]
	victimID := victim.Server().ID()
	victim.Stop()

	harness.WaitFor(t, applyWait, func() error {
		h, err := raftHealth(t, leader)
		if err != nil {
			return err
		}
		if v, ok := serverHealth(h, victimID); !ok || v.Status != structs.RaftServerFailed || v.Healthy {
			return fmt.Errorf("stopped server exp: failed, unhealthy got: %+v (in view: %v)", v, ok)
		}
		if !h.CleanupDeadServers || h.MinQuorum != 3 {
			return fmt.Errorf("view exp: cleanup on, min quorum 3 got: %+v", h)
		}
		return nil
	})
	// A failed server triggers a removal round at once and another runs
	// every 500 ms: ten rounds later it must still be there.
	until := time.Now().Add(10 * apReconcile)
	harness.WaitFor(t, applyWait, func() error {
		conf, err := configIDs(t, leader)
		if err != nil {
			return err
		}
		if !conf[victimID] || len(conf) != 3 {
			t.Fatalf("configuration with min quorum 3 exp: all three kept got: %v", conf)
		}
		if time.Now().Before(until) {
			return errors.New("watching the configuration for removal rounds")
		}
		return nil
	})
	mustRegister(t, c.WaitForLeader(electionWait), "with-one-failed")
}

// TestRaftHealth_RemovedServerRejoinsWhenBack: a server removed by cleanup
// asks to be added again when it comes back on its data dir (its own
// configuration may still list it, and the leader no longer contacts it),
// and the leader watches it afresh instead of removing it again for its
// old silence.
func TestRaftHealth_RemovedServerRejoinsWhenBack(t *testing.T) {
	const deadAfter = time.Second
	c := harness.NewCluster(t, 3, harness.Options{Configure: withAutopilot(server.AutopilotConfig{
		CleanupDeadServers: true, DeadServerThreshold: deadAfter})})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	waitAllHealthy(t, leader, 3)
	victim := c.Followers()[0]
	victimID := victim.Server().ID()
	victim.Stop()
	harness.WaitFor(t, applyWait, func() error {
		conf, err := configIDs(t, leader)
		if err != nil {
			return err
		}
		if conf[victimID] || len(conf) != 2 {
			return fmt.Errorf("configuration exp: %s removed, 2 left got: %v", victimID, conf)
		}
		return nil
	})
	mustRegister(t, leader, "while-removed")

	victim.Start()
	waitAllHealthy(t, leader, 3)
	// Three dead-server thresholds later it is still a member.
	until := time.Now().Add(3 * deadAfter)
	harness.WaitFor(t, applyWait, func() error {
		conf, err := configIDs(t, leader)
		if err != nil {
			return err
		}
		if !conf[victimID] || len(conf) != 3 {
			t.Fatalf("configuration after the removed server came back exp: all three got: %v", conf)
		}
		if time.Now().Before(until) {
			return errors.New("watching the configuration")
		}
		return nil
	})
	waitSameVolumes(t, c, []string{"while-removed"})
}
