package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/forward"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// TestChaos_InProcess runs the short schedule (every nemesis once) on the
// in-process backend; -chaos.duration=30m makes it long, -chaos.seed
// replays a schedule.
func TestChaos_InProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	c := NewInProcess(t, InProcessOptions{})
	Run(t, c, Options{})
}

var flagHistory = flag.String("chaos.history", "", "a saved history.json to check again (TestChaos_CheckSavedHistory)")

// TestChaos_CheckSavedHistory re-runs the linearizability and S8 checks on
// a history a failing run saved: go test ./integration/chaos -run
// CheckSavedHistory -chaos.history=/path/history.json (bounded by
// -chaos.check-timeout, default a minute)
func TestChaos_CheckSavedHistory(t *testing.T) {
	if *flagHistory == "" {
		t.Skip("no -chaos.history given")
	}
	buf, err := os.ReadFile(*flagHistory)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Ops []Op }
	if err := json.Unmarshal(buf, &doc); err != nil {
		t.Fatal(err)
	}
	callers := 0
	for _, o := range doc.Ops {
		callers = max(callers, o.Caller+1)
	}
	lin := checkLinearizable(doc.Ops, callers, checkTimeout(0))
	if lin.Err != nil {
		t.Error(lin.Err)
	}
	if len(lin.ByParts) > 0 {
		t.Logf("checked by allocation (the whole check did not finish): %s", strings.Join(lin.ByParts, ", "))
	}
	for _, p := range checkAcknowledged(doc.Ops) {
		t.Error(p)
	}
}

// keepLogsOnFailure saves every log of c when the test fails (registered
// after c, so it runs before c stops).
func keepLogsOnFailure(t *testing.T, c Cluster) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir, err := os.MkdirTemp("", "claimd-chaos-"+sanitize(t.Name())+"-")
		if err == nil {
			err = c.SaveLogs(dir)
		}
		t.Logf("logs saved in %s (%v)", dir, err)
	})
}

// Found by TestChaos_InProcess (kill-leader while release workers were
// checkpointing): server.Shutdown never returned. Raft runs with
// BatchApplyCh, so raft.Apply puts its future into a buffered channel; a
// future still in that buffer when Raft shuts down (or enqueued after: the
// select in raft.ApplyLog picks at random between the closed shutdown
// channel and free buffer space) is never answered, and an apply future
// has no ShutdownCh (hashicorp/raft#498), so Server.Apply's f.Error()
// blocks forever. Committed entries queued for the FSM when Raft shuts
// down are dropped the same way. In the server the callers are release
// workers, Claim handlers and the leader loop's Barrier: leader duties
// never stop and Shutdown waits for them forever (the heartbeat timers of
// the dead server go on firing "marking node down failed" every 5 s).
//
// This test shows the root cause directly: Server.Apply calls racing the
// shutdown must all return. Fixed in server.Apply (9b681c0): it waits for
// the future or the shutdown. The leader loop's Barrier still waits on its
// future alone.
func TestChaosRegression_ApplyReturnsWhenServerShutsDown(t *testing.T) {
	for attempt := 0; attempt < 5; attempt++ {
		c := harness.NewCluster(t, 3, harness.Options{})
		c.StartAll()
		leader := c.WaitForLeader(30 * time.Second)
		srv := leader.Server()
		var wg sync.WaitGroup
		var stop atomic.Bool
		var returned atomic.Int64
		var started atomic.Int64
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; !stop.Load() && n < 100000; n++ {
					started.Add(1)
					req := &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{
						volume(fmt.Sprintf("v%d-%d-%d", attempt, i, n), PluginID, structs.AccessModeSingleNodeWriter)}}
					_, _, err := srv.Apply(structs.VolumeRegisterRequestType, req)
					returned.Add(1)
					if err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(200 * time.Millisecond)
		leader.Stop()
		stop.Store(true)
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("attempt %d: Server.Apply calls exp: all return once the server shut down got: %d of %d still blocked after 15s",
				attempt, started.Load()-returned.Load(), started.Load())
		}
		c.StopAll()
	}
}

// Found by TestChaos_InProcess under -race (kill-leader): a data race in
// forward.Pool. get publishes a new poolEntry in p.conns and then writes
// e.client and e.err without p.mu (readers are meant to wait on e.ready);
// drop reads e.client under p.mu without waiting on e.ready. When one
// caller's session dies (drop) while another caller is already dialling a
// replacement for the same address, drop reads the new entry's client
// while the dialler writes it. Fixed in efbbdcd: drop compares only an
// entry whose ready channel is closed. The test fails only under -race.
func TestChaosRegression_PoolDropRacesRedial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A server whose sessions die at once: every call fails with a closed
	// session, so callers drop and redial concurrently.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				var b [1]byte
				_, _ = c.Read(b[:])
				time.Sleep(2 * time.Millisecond)
				c.Close()
			}()
		}
	}()
	slowDial := func(ctx context.Context, addr string) (net.Conn, error) {
		time.Sleep(time.Millisecond) // widen the window in which e.client is written
		return rpc.DefaultDialer(ctx, addr)
	}
	pool := forward.NewPool(slowDial, nil)
	defer pool.Shutdown()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = pool.RPC(ctx, ln.Addr().String(), "Status.Ping", &structs.EmptyArgs{}, &struct{}{})
				cancel()
			}
		}()
	}
	wg.Wait()
}

// Found by TestChaos_InProcess (every run, without any fault): an
// allocation stopped while its client agent was claiming its volumes ended
// "failed" instead of "complete". The claim lands after the stop commits
// and is refused ("alloc ... is being stopped and cannot claim", invalid),
// and the alloc runner reported every permanent claim error as a failure
// before it noticed the stop; the first terminal status stands, so the
// operator sees a stopped allocation as failed. Fixed in client: a run
// task whose claim fails checks whether the alloc is being stopped and, if
// so, leaves the report to the stop.
func TestChaosRegression_StoppedWhileClaimingEndsComplete(t *testing.T) {
	c := NewInProcess(t, InProcessOptions{Workers: 1})
	keepLogsOnFailure(t, c)
	admin := c.Client(c.Servers()[0])
	defer admin.Close()
	ctx := func() context.Context {
		cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return cx
	}
	// The parking volume: the agent retries its claim until the alloc stops.
	if _, err := admin.RegisterVolumes(ctx(), volume(parkingVolume, parkingPlugin, structs.AccessModeMultiNodeMultiWriter)); err != nil {
		t.Fatal(err)
	}
	node := c.Workers()[0].NodeID
	failed := 0
	for round := 0; round < 3; round++ {
		// Stop each alloc a few milliseconds after placing it, as the
		// workload does after a refused claim: the agent sees the alloc
		// and claims, and the claim lands just after the stop.
		var ids []string
		for i := 0; i < 40; i++ {
			id := fmt.Sprintf("r%d-a%d", round, i)
			ids = append(ids, id)
			a := &structs.Alloc{ID: id, NodeID: node,
				Volumes: []*structs.AllocVolumeRequest{{VolumeID: parkingVolume, ReadOnly: true}}}
			if _, err := admin.PlaceAllocs(ctx(), a); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(i%10) * time.Millisecond)
			if _, err := admin.StopAllocs(ctx(), id); err != nil {
				t.Fatal(err)
			}
		}
		harness.WaitFor(t, 30*time.Second, func() error {
			failed = 0
			for _, id := range ids {
				a, _, err := admin.Alloc(ctx(), id, structs.QueryOptions{})
				if err != nil {
					return err
				}
				if !a.Terminal() {
					return fmt.Errorf("alloc %s exp: terminal got: %s", id, a.ClientStatus)
				}
				if a.ClientStatus != structs.AllocClientComplete {
					failed++
					t.Logf("alloc %s stopped while claiming: %s (%s)", id, a.ClientStatus, a.ClientDescription)
				}
			}
			return nil
		})
		if failed > 0 {
			t.Fatalf("round %d: allocations stopped while claiming exp: all complete got: %d not complete", round, failed)
		}
	}
}

// Found by TestChaos_InProcess (S1 at the plugin, no fault needed): a
// writer's claim on a multi-node-single-writer volume is freed while its
// node keeps the read-write attachment, and a writer on another node is
// then admitted and its ControllerPublish asks for a second read-write
// attachment (hostdir refuses: "already has a writer on node ext-w1"; a
// plugin that does not check would have the volume attached read-write to
// two nodes).
//
// The sequence: writer A on w1 is published read-write. Readers claim on
// w1 too; each reader's ControllerPublish (read-only) is refused
// AlreadyExists by the plugin, because w1 is attached read-write, but the
// reader's claim is taken while its publish runs. A's release reaches its
// controller step while such a reader claim is taken; the watcher's S4
// check counts any taken claim on the node as "still using the
// attachment", skips ControllerUnpublish and frees A. The writer slot is
// now free by the access-mode table, yet w1 stays attached read-write
// (later readers on w1 keep failing AlreadyExists for the same reason,
// each taken while it fails, so the attachment can outlive A for many
// seconds).
//
// Minimal fix (watcher.controllerDetach, checked with this test and the
// chaos run): let only claims whose publish is recorded
// (ControllerPublished) keep the attachment or hold the detach back. A
// claim that is not published has nothing staged on the node (the client
// stages only after a recorded publish): a taken one publishes again after
// the unpublish (the attach lock orders them), a past one whose publish
// failed never used the node. Without the second half, a stream of
// failing claims on the node starves the writer's release ("waiting for
// alloc ... to be node-detached first", hundreds of past claims pile up).
//
// The deeper gap stays: an attachment is per (volume, node) with one
// read-only flag, while claimd publishes per claim with the claim's mode.
// A reader and a writer of one multi-node volume on one node cannot both
// be published (the second ControllerPublish is refused AlreadyExists,
// and the client fails that allocation: every chaos run shows a few), and
// with a plugin that accepts both, a writer that leaves while readers stay
// leaves the node attached read-write. Options: take the controller
// read-only flag from the access mode (read-only only for the *-reader-only
// modes), or keep an MNSW writer's slot until its node's attachment is
// detached.
func TestChaosRegression_WriterFreedWhileItsNodeStaysAttachedReadWrite(t *testing.T) {

	c := NewInProcess(t, InProcessOptions{})
	admin := c.Client(c.Servers()[0])
	defer admin.Close()
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 20*time.Second)
	}
	const vol = "mnsw"
	ctx, cancel := call()
	_, err := admin.RegisterVolumes(ctx, volume(parkingVolume, parkingPlugin, structs.AccessModeMultiNodeMultiWriter),
		volume(vol, PluginID, structs.AccessModeMultiNodeSingleWriter))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	w1, w2 := c.Workers()[0].NodeID, c.Workers()[1].NodeID
	// Parked allocs: the agents never claim for them, only this test does.
	claim := func(id, node string, write bool) error {
		ctx, cancel := call()
		defer cancel()
		if _, err := admin.PlaceAllocs(ctx, &structs.Alloc{ID: id, NodeID: node, Volumes: []*structs.AllocVolumeRequest{
			{VolumeID: parkingVolume, ReadOnly: true}, {VolumeID: vol, ReadOnly: !write}}}); err != nil {
			return err
		}
		mode := structs.ClaimModeRead
		if write {
			mode = structs.ClaimModeWrite
		}
		_, err := admin.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: vol, AllocID: id, NodeID: node, Mode: mode})
		return err
	}
	stop := func(id string) {
		ctx, cancel := call()
		defer cancel()
		_, _ = admin.Release(ctx, vol, id)
		_, _ = admin.StopAllocs(ctx, id)
	}
	if err := claim("writer-a", w1, true); err != nil {
		t.Fatalf("writer on w1: %v", err)
	}
	// Readers keep claiming on w1: each is taken while its read-only
	// ControllerPublish runs (and is refused: w1 is attached read-write).
	var done atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !done.Load() && n < 10000; n++ {
				id := fmt.Sprintf("reader-%d-%d", g, n)
				_ = claim(id, w1, false)
				stop(id)
				// Gaps, so that the writer's release finds moments with
				// no reader half released (else it waits for them).
				time.Sleep(time.Duration(20+10*g) * time.Millisecond)
			}
		}()
	}
	defer func() {
		done.Store(true)
		wg.Wait()
	}()
	stop("writer-a")
	// Once the writer's claim is freed, a writer on w2 is admitted. Its
	// ControllerPublish must not find w1 still attached read-write.
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		id := fmt.Sprintf("writer-c-%d", n)
		err := claim(id, w2, true)
		stop(id)
		switch {
		case err == nil:
			return
		case strings.Contains(err.Error(), "already has a writer"):
			t.Fatalf("S1: writer-a's claim was freed while w1 stayed attached read-write; the writer on w2 got: %v", err)
		case errors.Is(err, structs.ErrMaxClaims):
			time.Sleep(20 * time.Millisecond) // writer-a not freed yet
		default:
			t.Logf("writer on w2: %v", err)
		}
	}
	t.Fatalf("writer-a's claim exp: freed within 30s got: still held")
}

// Found by TestChaos_InProcess (kill-leader, kill-random): allocations
// whose claim was in flight to a server that was shutting down ended
// "failed: shutdown: claim volume ...: server shutting down". The alloc
// runner retried only no_leader, max_claims, unavailable, timeout and
// unschedulable, and took "shutdown" for a refusal, so restarting a server
// failed the allocations it was serving. Fixed in client: shutdown is
// retried like unavailable (the next call goes to another server).
func TestChaosRegression_ServerShutdownDoesNotFailAllocations(t *testing.T) {
	c := NewInProcess(t, InProcessOptions{Workers: 1})
	keepLogsOnFailure(t, c)
	ip := c.(*inProcess)
	admin := c.Client(c.Servers()[0])
	defer admin.Close()
	ctx := func() context.Context {
		cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return cx
	}
	if _, err := admin.RegisterVolumes(ctx(), volume(parkingVolume, parkingPlugin, structs.AccessModeMultiNodeMultiWriter)); err != nil {
		t.Fatal(err)
	}
	node := c.Workers()[0].NodeID
	var all []string
	for round := 0; round < 3; round++ {
		// A burst of claims from the agent (parked allocs: every claim
		// is refused unschedulable and retried), and the leader is killed
		// while they are in flight.
		var allocs []*structs.Alloc
		for i := 0; i < 40; i++ {
			id := fmt.Sprintf("r%d-a%d", round, i)
			all = append(all, id)
			allocs = append(allocs, &structs.Alloc{ID: id, NodeID: node,
				Volumes: []*structs.AllocVolumeRequest{{VolumeID: parkingVolume, ReadOnly: true}}})
		}
		leader := ip.hc.WaitForLeader(60 * time.Second)
		if _, err := admin.PlaceAllocs(ctx(), allocs...); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		if err := c.Kill(leader.Name); err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(leader.Name); err != nil {
			t.Fatal(err)
		}
	}
	ip.hc.WaitForLeader(60 * time.Second)
	time.Sleep(time.Second)
	var failed []string
	harness.WaitFor(t, 30*time.Second, func() error {
		failed = nil
		allocs, _, err := admin.Allocs(ctx(), node, structs.QueryOptions{})
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if a.ClientStatus == structs.AllocClientFailed {
				failed = append(failed, a.ID+": "+a.ClientDescription)
			}
		}
		return nil
	})
	if _, err := admin.StopAllocs(ctx(), all...); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("allocations failed by a server restart exp: none got: %d: %s", len(failed), strings.Join(failed[:min(3, len(failed))], "; "))
	}
}
