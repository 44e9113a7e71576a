package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// registerNodes registers client nodes running a healthy node plugin
// "hostdir" (no controller needed) through cl.
func registerNodes(t *testing.T, cl *api.Client, ids ...string) {
	t.Helper()
	for _, id := range ids {
		node := &structs.Node{ID: id, Name: id, SecretID: "secret-" + id, Status: structs.NodeStatusReady,
			CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, ExternalNodeID: "ext-" + id}}}
		if _, err := cl.RegisterNode(harness.Ctx(t, 30*time.Second), node); err != nil {
			t.Fatalf("register node %s: %v", id, err)
		}
	}
}

func TestClaimEndpoints_ThroughFollower(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	cl := c.Followers()[0].Client()
	ctx := harness.Ctx(t, 60*time.Second)

	registerNodes(t, cl, "n1", "n2")
	plug, _, err := cl.Plugin(ctx, "hostdir", structs.QueryOptions{})
	if err != nil || plug.NodesHealthy != 2 {
		t.Fatalf("plugin exp: 2 healthy nodes got: %+v %v", plug, err)
	}
	if _, err := cl.RegisterVolumes(ctx, testVolume("vol")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PlaceAllocs(ctx,
		&structs.Alloc{ID: "a1", NodeID: "n1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "vol"}}},
		&structs.Alloc{ID: "a2", NodeID: "n2", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "vol"}}},
	); err != nil {
		t.Fatal(err)
	}

	// Each claim authenticates as its node, as a client agent does.
	claim := func(alloc, node string) (*structs.VolumeClaimResponse, error) {
		return cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: "vol", AllocID: alloc, NodeID: node, Mode: structs.ClaimModeWrite,
			WriteRequest: structs.WriteRequest{AuthToken: "secret-" + node}})
	}
	resp, err := claim("a1", "n1")
	if err != nil || !resp.New || resp.Claim.State != structs.ClaimStateTaken {
		t.Fatalf("first claim exp: new taken claim got: %+v %v", resp, err)
	}
	if resp.Volume == nil || resp.Volume.Secrets["token"] != "s3cret" {
		t.Fatalf("claim answer exp: the volume with its secrets for the node got: %+v", resp.Volume)
	}
	// The same claim asked without the node's secret: no secrets.
	resp, err = cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: "vol", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite})
	if err != nil || resp.Volume == nil || len(resp.Volume.Secrets) != 0 {
		t.Fatalf("claim answer without the node secret exp: volume without secrets got: %+v %v", resp.Volume, err)
	}
	if resp.Claim.ExternalNodeID != "ext-n1" {
		t.Fatalf("claim external node ID exp: ext-n1 got: %q", resp.Claim.ExternalNodeID)
	}
	if resp, err := claim("a1", "n1"); err != nil || resp.New {
		t.Fatalf("re-claim by the same alloc exp: idempotent, not new got: %+v %v", resp, err)
	}
	if _, err := claim("a2", "n2"); !errors.Is(err, structs.ErrMaxClaims) {
		t.Fatalf("second writer of single-node-writer exp: max_claims got: %v", err)
	}
	if _, err := cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: "nope", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("claim of unknown volume exp: not_found got: %v", err)
	}
	if _, err := cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: "vol", AllocID: "a1", Mode: "scribble"}); !errors.Is(err, structs.ErrInvalid) {
		t.Fatalf("claim with bad mode exp: invalid got: %v", err)
	}

	// The client reports a1 terminal: its claim becomes past and a gc eval
	// is pending, in the same entry.
	if _, err := cl.UpdateAllocs(ctx, "n1", &structs.AllocClientUpdate{ID: "a1", ClientStatus: structs.AllocClientComplete}); err != nil {
		t.Fatal(err)
	}
	vol, _, err := cl.Volume(ctx, "vol", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pc := vol.PastClaims["a1"]; pc == nil || len(vol.WriteClaims) != 0 {
		t.Fatalf("after terminal alloc exp: a1 past, no live writer got: write=%v past=%v", vol.WriteClaims, vol.PastClaims)
	}
	evals, _, err := cl.Evals(ctx, structs.EvalStatusPending, "vol", structs.QueryOptions{})
	if err != nil || len(evals) != 1 || evals[0].Type != structs.EvalTypeVolumeClaimGC {
		t.Fatalf("pending evals exp: one volume-claim-gc got: %+v %v", evals, err)
	}
	// The past claim still counts against exclusivity until freed.
	if _, err := claim("a2", "n2"); !errors.Is(err, structs.ErrMaxClaims) {
		t.Fatalf("writer while a past claim is unfreed exp: max_claims got: %v", err)
	}
}

func TestBlockingQuery_AllocListWakesOnChange(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	cl := c.Followers()[0].Client()
	ctx := harness.Ctx(t, 60*time.Second)
	registerNodes(t, cl, "n1")
	_, meta, err := cl.Allocs(ctx, "n1", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []*structs.Alloc, 1)
	go func() {
		allocs, _, err := cl.Allocs(ctx, "n1", structs.QueryOptions{MinQueryIndex: meta.Index, MaxQueryTime: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- allocs
	}()
	// The query must still be waiting: nothing changed yet.
	select {
	case a := <-got:
		t.Fatalf("blocking query exp: waits got: returned %v", a)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := c.Servers[0].Client().PlaceAllocs(ctx, &structs.Alloc{ID: "a1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if len(a) != 1 || a[0].ID != "a1" {
			t.Fatalf("woken query exp: [a1] got: %v", a)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocking query exp: woken by the placement got: still waiting")
	}
	// A stale blocking query with a short MaxQueryTime returns on timeout.
	start := time.Now()
	_, m2, err := cl.Allocs(ctx, "n1", structs.QueryOptions{AllowStale: true, MinQueryIndex: 1 << 40, MaxQueryTime: 200 * time.Millisecond})
	if err != nil || m2.Index == 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("timed-out blocking query exp: returns with an index got: %v %v after %s", m2, err, time.Since(start))
	}
}

// claimAsAgent claims as a client agent does (client/alloc_runner.go): a
// claim answered with a retryable error is sent again until ctx ends. On a
// busy machine the leader can miss its lease while a claim batch is being
// committed; the batch's callers are then answered unavailable ("leadership
// lost while committing; the outcome is unknown"), and sending the claim
// again is how an agent finds out: a re-claim by the same alloc answers the
// claim it holds.
func claimAsAgent(ctx context.Context, cl *api.Client, req *structs.VolumeClaimRequest) error {
	wait := 50 * time.Millisecond
	for {
		_, err := cl.Claim(ctx, req)
		if err == nil || !(structs.IsRetryable(err) || errors.Is(err, structs.ErrShutdown)) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func TestVolumeClaim_ConcurrentClaimsShareRaftEntries(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	cl := leader.Client()
	ctx := harness.Ctx(t, 60*time.Second)
	registerNodes(t, cl, "n1")
	const n = 64
	var vols []*structs.Volume
	var allocs []*structs.Alloc
	for i := 0; i < n; i++ {
		v := testVolume(fmt.Sprintf("v%02d", i))
		v.AccessMode = structs.AccessModeMultiNodeMultiWriter
		vols = append(vols, v)
		allocs = append(allocs, &structs.Alloc{ID: fmt.Sprintf("a%02d", i), NodeID: "n1",
			Volumes: []*structs.AllocVolumeRequest{{VolumeID: v.ID}}})
	}
	if _, err := cl.RegisterVolumes(ctx, vols...); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PlaceAllocs(ctx, allocs...); err != nil {
		t.Fatal(err)
	}
	before := leader.Server().Raft().LastIndex()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Separate sessions, as separate client agents would have.
			errs <- claimAsAgent(ctx, leader.Client(), &structs.VolumeClaimRequest{VolumeID: vols[i].ID, AllocID: allocs[i].ID, NodeID: "n1", Mode: structs.ClaimModeWrite})
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	entries := leader.Server().Raft().LastIndex() - before
	if entries >= n {
		t.Fatalf("raft entries for %d concurrent claims exp: fewer (batched) got: %d", n, entries)
	}
	t.Logf("%d concurrent claims committed in %d raft entries", n, entries)
}
