package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// TestPluginLimitAndTopology_RealAgents runs a secured three-server
// cluster with real client agents: worker w1's hostdir node plugin allows
// one volume, and a controller on its own node.
//
//   - the plugin table shows the capabilities and w1's limit (item 7);
//   - a second volume on w1 is refused with a retryable max_claims naming
//     the node, the plugin and the limit, and the agent's retries succeed
//     once the first volume is released and freed (item 6);
//   - a volume whose topology w1 is outside of fails its alloc instead of
//     being retried forever (item 5).
func TestPluginLimitAndTopology_RealAgents(t *testing.T) {
	e := newReleaseEnvWith(t, func(p *harness.TestPlugin) { p.MaxVolumes = 1 }, "w1")
	w1 := e.clients["w1"].NodeID()

	p, _, err := e.api.Plugin(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cc := p.ControllerCapabilities; cc == nil || !cc.PublishUnpublish || !cc.CreateDeleteVolume {
		t.Fatalf("exp: controller capabilities with publish and create/delete got: %+v", cc)
	}
	if nc := p.NodeCapabilities; nc == nil || !nc.StageUnstageVolume {
		t.Fatalf("exp: node capabilities with staging got: %+v", nc)
	}
	if n := p.Nodes[w1]; n == nil || n.MaxVolumes != 1 {
		t.Fatalf("exp: w1's node instance with max volumes 1 got: %+v", n)
	}

	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.register(t, "v2", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)

	// a2 wants a second volume on w1: its agent keeps retrying, and a
	// claim made here on its behalf shows why.
	e.run(t, "a2", "w1", "v2")
	_, err = e.c.Followers()[0].Client().Claim(harness.Ctx(t, 10*time.Second), &structs.VolumeClaimRequest{
		VolumeID: "v2", AllocID: "a2", NodeID: w1, Mode: structs.ClaimModeWrite})
	if !errors.Is(err, structs.ErrMaxClaims) || !structs.IsRetryable(err) {
		t.Fatalf("exp: retryable max_claims got: %v", err)
	}
	for _, part := range []string{w1, `plugin "hostdir"`, "is 1"} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("exp: refusal naming %s got: %v", part, err)
		}
	}

	// Releasing v1 frees w1's slot; a2's own retries then get v2.
	if _, err := e.api.StopAllocs(harness.Ctx(t, 10*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitFreed(t, "v1", 30*time.Second)
	e.waitAlloc(t, "a2", structs.AllocClientRunning)

	// Topology: w1's plugin reports no segments, so a volume reachable
	// only from zone a is refused there, and the alloc fails rather than
	// retrying forever.
	v3 := testVolume("v3")
	v3.AccessibleTopology = []map[string]string{{"zone": "a"}}
	if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), v3); err != nil {
		t.Fatal(err)
	}
	e.run(t, "a3", "w1", "v3")
	e.waitAlloc(t, "a3", structs.AllocClientFailed)
	a3, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a3", structs.QueryOptions{})
	if err != nil || !strings.Contains(a3.ClientDescription, strings.TrimSpace(structs.TopologyRefusal)) {
		t.Fatalf("exp: failed with the topology reason got: %+v %v", a3, err)
	}
	if v, _, _ := e.api.Volume(harness.Ctx(t, 10*time.Second), "v3", structs.QueryOptions{}); v == nil || v.HasClaims() {
		t.Fatalf("exp: v3 without claims got: %+v", v)
	}
}

// TestTopology_ClaimsThroughFollower drives topology through node
// fingerprints registered over the API (as an agent whose plugin reports
// segments would): a node in the volume's zone claims it, a node outside
// is refused unschedulable with the topology marker intact after the
// forwarding hop.
func TestTopology_ClaimsThroughFollower(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	cl := c.Followers()[0].Client()
	ctx := harness.Ctx(t, 60*time.Second)
	for id, zone := range map[string]string{"n1": "a", "n2": "b"} {
		node := &structs.Node{ID: id, Name: id, SecretID: "secret-" + id, Status: structs.NodeStatusReady,
			CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true,
				ExternalNodeID: "ext-" + id, AccessibleTopology: map[string]string{"zone": zone}}}}
		if _, err := cl.RegisterNode(ctx, node); err != nil {
			t.Fatalf("register node %s: %v", id, err)
		}
	}
	v := testVolume("vol")
	v.AccessMode = structs.AccessModeMultiNodeMultiWriter
	v.AccessibleTopology = []map[string]string{{"zone": "a"}}
	if _, err := cl.RegisterVolumes(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PlaceAllocs(ctx,
		&structs.Alloc{ID: "a1", NodeID: "n1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "vol"}}},
		&structs.Alloc{ID: "a2", NodeID: "n2", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "vol"}}},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: "vol", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite}); err != nil {
		t.Fatalf("n1 in zone a: exp: claimed got: %v", err)
	}
	_, err := cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: "vol", AllocID: "a2", NodeID: "n2", Mode: structs.ClaimModeWrite})
	if !errors.Is(err, structs.ErrUnschedulable) || !structs.IsTopologyRefusal(err) {
		t.Fatalf("n2 in zone b: exp: unschedulable topology refusal got: %v", err)
	}
	for _, part := range []string{`volume "vol"`, `node "n2"`, "[zone=a]", "zone=b"} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("exp: refusal naming %s got: %v", part, err)
		}
	}
	p, _, err := cl.Plugin(ctx, "hostdir", structs.QueryOptions{})
	if err != nil || p.Nodes["n2"].AccessibleTopology["zone"] != "b" {
		t.Fatalf("exp: n2's topology in the plugin table got: %+v %v", p, fmt.Sprint(err))
	}
}
