package integration

import (
	"errors"
	"fmt"
	"github.com/claimd/claimd/api"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/raftnode"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

const (
	electionWait = 20 * time.Second
	applyWait    = 20 * time.Second
)

func testVolume(id string) *structs.Volume {
	return &structs.Volume{
		ID: id, Name: "vol " + id, ExternalID: "ext-" + id, PluginID: "hostdir",
		AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
		Secrets: structs.Secrets{"token": "s3cret"},
	}
}

// mustRegister writes a volume through srv and returns the commit index.
func mustRegister(t *testing.T, s *harness.TestServer, id string) uint64 {
	t.Helper()
	reg, err := s.Client().RegisterVolumes(harness.Ctx(t, 30*time.Second), testVolume(id))
	if err != nil {
		t.Fatalf("register %s via %s: exp: no error got: %v", id, s.Name, err)
	}
	return reg.Index
}

// localVolumeIDs reads a server's own state (no forwarding).
func localVolumeIDs(t *testing.T, s *harness.TestServer) []string {
	t.Helper()
	vols, err := s.Server().State().Volumes(nil, "")
	if err != nil {
		t.Fatalf("%s: read volumes: %v", s.Name, err)
	}
	ids := make([]string, 0, len(vols))
	for _, v := range vols {
		ids = append(ids, v.ID)
	}
	sort.Strings(ids)
	return ids
}

// waitSameVolumes polls until every running server holds exactly want.
func waitSameVolumes(t *testing.T, c *harness.Cluster, want []string) {
	t.Helper()
	sort.Strings(want)
	harness.WaitFor(t, applyWait, func() error {
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			got := localVolumeIDs(t, s)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s volumes exp: %v got: %v", s.Name, want, got)
			}
		}
		return nil
	})
}

func TestBootstrapExpect_FormsOneClusterInAnyStartOrder(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			c := harness.NewCluster(t, 3, harness.Options{})
			for _, i := range order {
				// Each server is up and answering (and has tried its
				// joins) before the next one starts.
				c.Servers[i].Start()
				if err := c.Servers[i].Client().Ping(harness.Ctx(t, 10*time.Second)); err != nil {
					t.Fatalf("%s ping: %v", c.Servers[i].Name, err)
				}
			}
			leader := c.WaitForLeader(electionWait)
			harness.WaitFor(t, applyWait, func() error {
				for _, s := range c.Servers {
					conf, err := s.Client().RaftConfiguration(harness.Ctx(t, 10*time.Second), true)
					if err != nil {
						return err
					}
					if len(conf.Servers) != 3 {
						return fmt.Errorf("%s: raft servers exp: 3 got: %d", s.Name, len(conf.Servers))
					}
				}
				return nil
			})
			mustRegister(t, leader, "v1")
			waitSameVolumes(t, c, []string{"v1"})
		})
	}
}

func TestBootstrapExpect_LoneServerNeverElectsItself(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	lone := c.Servers[0]
	lone.Start()
	// A negative property needs an observation window: ten election
	// timeouts at test timings.
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		if lone.IsLeader() {
			t.Fatal("lone server with -bootstrap-expect 3 exp: no leader got: it elected itself")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cfg := c.APIConfig(lone.Addr, "")
	cfg.RetryNoLeaderFor = -1
	noRetry, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer noRetry.Close()
	_, err = noRetry.RegisterVolumes(harness.Ctx(t, 20*time.Second), testVolume("v1"))
	if !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("write to leaderless server exp: no_leader got: %v", err)
	}
	// The other two arrive: now the cluster forms.
	c.Servers[1].Start()
	c.Servers[2].Start()
	c.WaitForLeader(electionWait)
}

func TestWriteThroughFollower_IsForwardedAndVisibleOnAll(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	f := c.Followers()[0]
	idx := mustRegister(t, f, "v1")
	c.WaitForApplied(idx, applyWait)
	waitSameVolumes(t, c, []string{"v1"})

	// A consistent read through the follower is answered by the leader;
	// a stale read by the follower itself. Both see the write.
	ctx := harness.Ctx(t, 10*time.Second)
	for _, stale := range []bool{false, true} {
		vol, _, err := f.Client().Volume(ctx, "v1", structs.QueryOptions{AllowStale: stale})
		if err != nil || vol.ID != "v1" {
			t.Fatalf("read (stale=%v) exp: v1 got: %v %v", stale, vol, err)
		}
		if vol.Secrets["token"] == "s3cret" {
			t.Fatalf("read exp: secret redacted got: the secret value")
		}
	}
	// Typed errors survive the hop follower → leader.
	_, _, err := f.Client().Volume(ctx, "missing", structs.QueryOptions{})
	if !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("read of a missing volume exp: not_found got: %v", err)
	}
	_, err = f.Client().RegisterVolumes(ctx, &structs.Volume{ID: "bad"})
	if !errors.Is(err, structs.ErrInvalid) {
		t.Fatalf("invalid spec exp: invalid got: %v", err)
	}
}

func TestLeaderKilled_NewLeaderElectedAndOldLeaderCatchesUp(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	old := c.WaitForLeader(electionWait)
	mustRegister(t, old, "before")
	old.Stop()

	newLeader := c.WaitForLeader(electionWait)
	if newLeader == old {
		t.Fatal("exp: a different leader got: the stopped one")
	}
	mustRegister(t, c.Followers()[0], "after")
	old.Start()
	waitSameVolumes(t, c, []string{"before", "after"})
}

func TestRestartedServer_CatchesUpFromInstalledSnapshot(t *testing.T) {
	// On both log stores: a follower installing a snapshot truncates its
	// whole log and appends after the snapshot's index, which raft-wal
	// does by starting a new segment.
	for _, store := range []string{raftnode.LogStoreBoltDB, raftnode.LogStoreWAL} {
		t.Run(store, func(t *testing.T) { testCatchesUpFromSnapshot(t, store) })
	}
}

func testCatchesUpFromSnapshot(t *testing.T, store string) {
	// Snapshot every few entries and keep almost no trailing log, so a
	// server that misses writes must be sent a snapshot. raft-wal drops
	// compacted entries a segment at a time (the leader can still read
	// the rest of a segment, and would send those instead): small
	// segments make it drop them here.
	c := harness.NewCluster(t, 3, harness.Options{SnapshotThreshold: 8, TrailingLogs: 4,
		Configure: func(cfg *server.Config) {
			cfg.SnapshotInterval = 200 * time.Millisecond
			cfg.RaftLogStore = store
			cfg.WALSegmentSize = 4096
		}})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	lagging := c.Followers()[0]
	lagging.Stop()
	var want []string
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("v%02d", i)
		mustRegister(t, leader, id)
		want = append(want, id)
	}
	harness.WaitFor(t, applyWait, func() error {
		if leader.Server().LastSnapshotIndex() == 0 {
			return errors.New("leader has taken no snapshot yet")
		}
		return nil
	})
	lagging.Start()
	waitSameVolumes(t, c, want)
	if n := lagging.Server().RestoreCount(); n == 0 {
		t.Fatalf("lagging server exp: caught up by installing a snapshot got: %d restores", n)
	}
}

func TestIsolatedLeader_CannotCommitAndStateConvergesAfterHeal(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	old := c.WaitForLeader(electionWait)
	mustRegister(t, old, "v1")

	c.Net.Isolate(old.Name)
	// The isolated leader cannot commit: its write fails (leadership lost,
	// no leader, or timeout) and is never visible. The answer is taken as
	// given (ServerIdentityClientNoRetry): the default client would retry
	// the old leader's no_leader for 10 s before returning the same error.
	_, err := old.ServerIdentityClientNoRetry().RegisterVolumes(harness.Ctx(t, 30*time.Second), testVolume("lost"))
	if err == nil {
		t.Fatal("write to an isolated leader exp: error got: committed")
	}
	// The majority elects a new leader and keeps writing.
	var majority *harness.TestServer
	harness.WaitFor(t, electionWait, func() error {
		for _, s := range c.Servers {
			if s != old && s.IsLeader() {
				majority = s
				return nil
			}
		}
		return errors.New("majority has no leader yet")
	})
	mustRegister(t, majority, "v2")

	c.Net.Heal()
	c.WaitForLeader(electionWait)
	waitSameVolumes(t, c, []string{"v1", "v2"})
}

func TestFullClusterRestart_KeepsEveryAcknowledgedWrite(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	var want []string
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("v%02d", i)
		mustRegister(t, c.Servers[i%3], id)
		want = append(want, id)
	}
	_ = leader
	c.StopAll()
	c.StartAll()
	c.WaitForLeader(electionWait)
	waitSameVolumes(t, c, want)
}

func TestLateServer_JoinsThroughLeaderAndLeaveRemovesIt(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mustRegister(t, leader, "v1")

	late := c.AddServer()
	harness.WaitFor(t, applyWait, func() error {
		conf, err := leader.Client().RaftConfiguration(harness.Ctx(t, 10*time.Second), false)
		if err != nil {
			return err
		}
		if len(conf.Servers) != 4 {
			return fmt.Errorf("raft servers exp: 4 got: %d", len(conf.Servers))
		}
		return nil
	})
	waitSameVolumes(t, c, []string{"v1"})

	// A graceful leave removes the server from the configuration.
	if err := late.Server().Leave(30 * time.Second); err != nil {
		t.Fatalf("leave: %v", err)
	}
	late.Stop()
	harness.WaitFor(t, applyWait, func() error {
		conf, err := leader.Client().RaftConfiguration(harness.Ctx(t, 10*time.Second), false)
		if err != nil {
			return err
		}
		if len(conf.Servers) != 3 {
			return fmt.Errorf("raft servers after leave exp: 3 got: %d", len(conf.Servers))
		}
		return nil
	})
}

func TestRemovePeer_ThroughFollowerShrinksConfiguration(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	fs := c.Followers()
	victim, via := fs[0], fs[1]
	victimID := victim.Server().ID()
	victim.Stop()
	if err := via.Client().RaftRemovePeer(harness.Ctx(t, 30*time.Second), victimID, ""); err != nil {
		t.Fatalf("remove-peer: %v", err)
	}
	conf, err := via.Client().RaftConfiguration(harness.Ctx(t, 10*time.Second), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range conf.Servers {
		if s.ID == victimID {
			t.Fatalf("configuration after remove-peer exp: without %s got: %+v", victimID, conf.Servers)
		}
	}
	err = via.Client().RaftRemovePeer(harness.Ctx(t, 30*time.Second), "no-such-peer", "")
	if !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("remove unknown peer exp: not_found got: %v", err)
	}
}

func TestBootstrapExpect_ServersThatDisagreeNeverBootstrap(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{Configure: func(cfg *server.Config) {
		if cfg.NodeName == "s3" {
			cfg.BootstrapExpect = 2
		}
	}})
	c.StartAll()
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		for _, s := range c.Servers {
			if s.IsLeader() {
				t.Fatalf("servers with different -bootstrap-expect exp: no cluster got: %s leads", s.Name)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Chaos regression: after a leadership transfer, a read returned a claim
// released 24 s earlier. The new leader had every entry in its log but had
// not applied them yet (a restarted server replays only once it learns the
// commit index), and a consistent read was served from that state. A
// leader now serves consistent reads only after its barrier: everything
// committed before it won is applied.
func TestLeader_NewLeaderServesNoConsistentReadBeforeItHasAppliedEverything(t *testing.T) {
	var gates sync.Map // server name → channel the state machine waits on
	c := harness.NewCluster(t, 3, harness.Options{Configure: func(cfg *server.Config) {
		name := cfg.NodeName
		cfg.BeforeApply = func(uint64) {
			if g, ok := gates.Load(name); ok {
				<-g.(chan struct{})
			}
		}
	}})
	c.StartAll()
	leader := c.WaitForLeader(30 * time.Second)
	target := c.Followers()[0]
	mustRegister(t, leader, "before")

	// The target's state machine stops; its log keeps up.
	hold := make(chan struct{})
	gates.Store(target.Name, hold)
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	idx := mustRegister(t, leader, "during")
	harness.WaitFor(t, 30*time.Second, func() error {
		if last := target.Server().Raft().LastIndex(); last < idx {
			return fmt.Errorf("%s's log exp: index %d got: %d", target.Name, idx, last)
		}
		return nil
	})
	if err := leader.Client().TransferLeadership(harness.Ctx(t, 30*time.Second), target.Server().ID()); err != nil {
		t.Fatalf("transfer leadership to %s: %v", target.Name, err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		if !target.IsLeader() {
			return fmt.Errorf("%s exp: leader got: not yet", target.Name)
		}
		return nil
	})

	// Its state lacks "during": a consistent read must not answer from it.
	cl := target.Client()
	v, _, err := cl.Volume(harness.Ctx(t, 8*time.Second), "during", structs.QueryOptions{})
	if err == nil || errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("consistent read on a leader that has not applied index %d exp: no answer (no_leader) got: volume %v, %v", idx, v, err)
	}
	// Once it has applied everything, it answers.
	release()
	harness.WaitFor(t, 30*time.Second, func() error {
		v, _, err := cl.Volume(harness.Ctx(t, 10*time.Second), "during", structs.QueryOptions{})
		if err != nil || v == nil {
			return fmt.Errorf("read of \"during\" exp: the volume got: %v, %v", v, err)
		}
		return nil
	})
}

// The last server running with the others gone cannot be removed by
// anyone: Leave says so and stops at once instead of waiting out its
// timeout with an error (issue 30: stopping the last servers with
// leave_on_terminate hung 30 s).
func TestLeave_LastServerStopsAtOnce(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	for _, f := range c.Followers() {
		f.Stop()
	}
	start := time.Now()
	if err := leader.Server().Leave(30 * time.Second); err != nil {
		t.Fatalf("leave of the last server exp: stopped without error got: %v", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("leave of the last server exp: well within its 30 s timeout got: %s", took)
	}
}
