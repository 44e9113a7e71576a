package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// waitFor polls fn until it returns nil or the deadline passes.

// mustNewServer starts a one-server cluster on loopback (BootstrapExpect
// 1: it leads) or, with expect 0, a server that never forms a cluster.
func mustNewServer(t *testing.T, expect int, ap AutopilotConfig) *Server {
	t.Helper()
	s, err := New(Config{DataDir: t.TempDir(), BindAddr: "127.0.0.1:0", BootstrapExpect: expect,
		RaftMultiplier: 0.5, JoinInterval: 100 * time.Millisecond, Autopilot: ap})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

func mustNewLeader(t *testing.T, ap AutopilotConfig) *Server {
	t.Helper()
	s := mustNewServer(t, 1, ap)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if _, self := s.Leader(); !self {
			return errors.New("leader exp: this server got: not yet")
		}
		return nil
	})
	return s
}

func healthOf(t *testing.T, s *Server) *structs.RaftHealthResponse {
	t.Helper()
	var h *structs.RaftHealthResponse
	testutil.WaitFor(t, 20*time.Second, func() error {
		var err error
		h, err = s.RaftHealth()
		return err
	})
	return h
}

func TestAutopilot_LoneLeaderIsHealthyWithScaledDefaults(t *testing.T) {
	s := mustNewLeader(t, AutopilotConfig{UpdateInterval: 100 * time.Millisecond})
	h := healthOf(t, s)
	if !h.Healthy || len(h.Servers) != 1 {
		t.Fatalf("health exp: healthy, one server got: %+v", h)
	}
	got := h.Servers[0]
	if got.ID != s.ID() || !got.Leader || !got.Voter || !got.Healthy || got.Status != structs.RaftServerAlive ||
		got.LastContact != 0 || got.IndexLag != 0 || got.LastIndex == 0 || got.LastTerm == 0 || h.LeaderID != s.ID() {
		t.Fatalf("leader's own health exp: leader, voter, healthy, alive, contact 0, lag 0 got: %+v", got)
	}
	// Thresholds not configured take the defaults, Raft timings scaled by
	// the multiplier (0.5 here), the dead-server threshold not.
	if time.Duration(h.LastContactThreshold) != time.Second || h.MaxTrailingLogs != defaultMaxTrailingLogs ||
		time.Duration(h.DeadServerThreshold) != defaultDeadServerThreshold || h.CleanupDeadServers {
		t.Fatalf("thresholds exp: 1s, %d, %s, cleanup off got: %s, %d, %s, %v", defaultMaxTrailingLogs, defaultDeadServerThreshold,
			h.LastContactThreshold, h.MaxTrailingLogs, h.DeadServerThreshold, h.CleanupDeadServers)
	}
}

func TestAutopilot_OnlyTheLeaderAnswers(t *testing.T) {
	s := mustNewServer(t, 0, AutopilotConfig{})
	if _, err := s.RaftHealth(); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("raft health on a server that does not lead exp: no_leader got: %v", err)
	}
}

// Leadership lost and won again: the duty stops autopilot (forgetting what
// it learnt) and starts it again.
func TestAutopilot_DutyStopsAndStartsWithLeadership(t *testing.T) {
	s := mustNewLeader(t, AutopilotConfig{UpdateInterval: 100 * time.Millisecond})
	healthOf(t, s)
	s.autopilot.SetEnabled(false)
	if _, err := s.RaftHealth(); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("raft health with the duty off exp: no_leader got: %v", err)
	}
	if status, _ := s.autopilot.ap.IsRunning(); status != autopilot.NotRunning {
		t.Fatalf("autopilot after SetEnabled(false) exp: %s got: %s", autopilot.NotRunning, status)
	}
	s.autopilot.SetEnabled(true)
	if h := healthOf(t, s); !h.Healthy {
		t.Fatalf("health after the duty is on again exp: healthy got: %+v", h)
	}
}

// A server that does not answer keeps its last known stats, and its last
// contact grows from the newest contact the leader knew of (here: none, so
// from when the leader first saw it), so it turns unhealthy and stays so.
func TestAutopilot_UnansweringServerLastContactGrows(t *testing.T) {
	s := mustNewLeader(t, AutopilotConfig{UpdateInterval: time.Hour, DeadServerThreshold: 200 * time.Millisecond})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	d := s.autopilot
	// The leader duties start after leadership is won, and enabling
	// autopilot starts its peer records afresh: fetch only once it is on,
	// or the records this test reads may be wiped under it.
	testutil.WaitFor(t, 20*time.Second, func() error {
		d.runMu.Lock()
		defer d.runMu.Unlock()
		if !d.on {
			return errors.New("autopilot exp: enabled got: not yet")
		}
		return nil
	})
	ghost := raft.ServerID("ghost")
	servers := map[raft.ServerID]*autopilot.Server{
		raft.ServerID(s.ID()): {ID: raft.ServerID(s.ID()), Address: raft.ServerAddress(s.Addr())},
		ghost:                 {ID: ghost, Address: raft.ServerAddress(gone)},
	}
	fetch := func() map[raft.ServerID]*autopilot.ServerStats {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return d.FetchServerStats(ctx, servers)
	}
	first := fetch()
	if st := first[raft.ServerID(s.ID())]; st == nil || st.LastContact != 0 || st.LastIndex == 0 {
		t.Fatalf("leader's own stats exp: contact 0, an index got: %+v", st)
	}
	if st := first[ghost]; st == nil || st.LastTerm != 0 || st.LastContact < 0 {
		t.Fatalf("unanswering server's stats exp: term 0, contact >= 0 got: %+v", st)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if later := fetch()[ghost]; later.LastContact <= first[ghost].LastContact {
			return fmt.Errorf("ghost's last contact exp: > %s got: %s", first[ghost].LastContact, later.LastContact)
		}
		return nil
	})
	// Past the dead-server threshold it counts as failed, but it is not in
	// the configuration, so nothing is removed.
	d.mu.Lock()
	away := d.unreachableFor(d.peers[ghost], time.Now())
	d.mu.Unlock()
	if away <= 0 {
		t.Fatalf("ghost unreachable for exp: > 0 got: %s", away)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if away := d.unreachableFor(d.peers[ghost], time.Now()); away <= d.deadAfter {
			return fmt.Errorf("ghost unreachable for exp: > %s got: %s", d.deadAfter, away)
		}
		return nil
	})
	d.RemoveFailedServer(&autopilot.Server{ID: ghost, Address: raft.ServerAddress(gone)})
	f := s.raft.Raft.GetConfiguration()
	if err := f.Error(); err != nil || len(f.Configuration().Servers) != 1 {
		t.Fatalf("configuration exp: the leader alone got: %+v %v", f.Configuration().Servers, err)
	}
	// The leader itself is never removed, whatever it is asked.
	d.RemoveFailedServer(&autopilot.Server{ID: raft.ServerID(s.ID())})
	if _, self := s.Leader(); !self {
		t.Fatal("leader after being asked to remove itself exp: still leads got: not")
	}
}
