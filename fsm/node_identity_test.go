package fsm

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

func (h *harness) identity(id string) *structs.NodeIdentity {
	h.t.Helper()
	i, err := h.f.State().NodeIdentity(nil, id)
	if err != nil {
		h.t.Fatalf("NodeIdentity(%q): %v", id, err)
	}
	return i
}

// A node ID stays bound to the secret it first registered with after the
// node is deregistered: another secret is refused (and changes nothing),
// the node's own secret brings it back as the same identity, and only the
// hash of the secret is kept.
func TestNodeIdentity_DeregisteredIDStaysReserved(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1")) // index 1
	if id := h.identity("n1"); id != nil {
		t.Fatalf("reservation of a registered node exp: none (its node row binds the ID) got: %+v", id)
	}
	if gen, ok := h.f.State().NodeGeneration("n1"); !ok || gen != 1 {
		t.Fatalf("generation of a registered node exp: its node row's 1 got: %d %v", gen, ok)
	}
	if !bytes.Contains(mustSnapshotBytes(t, h.f), []byte("secret-n1")) {
		// the node row holds the secret while registered (as before)
		t.Fatalf("snapshot exp: the registered node's secret in its node row")
	}
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}}) // 2
	if id := h.identity("n1"); id == nil || id.CreateIndex != 1 || id.DeregisterIndex != 2 || id.SecretHash != structs.NodeSecretHash("secret-n1") {
		t.Fatalf("reservation after deregistration exp: created 1, deregistered 2, the secret's hash got: %+v", id)
	}
	if bytes.Contains(mustSnapshotBytes(t, h.f), []byte("secret-n1")) {
		t.Fatalf("snapshot of a deregistered node exp: no raw secret (only its hash) got: the secret")
	}

	impostor := testNode("n1")
	impostor.SecretID = "attacker-secret"
	err := h.mustRefuse(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: impostor}, structs.CodePermissionDenied)
	if !strings.Contains(err.Error(), "reserved") || strings.Contains(err.Error(), "attacker-secret") || strings.Contains(err.Error(), "secret-n1") {
		t.Fatalf("refusal exp: says the ID is reserved, names no secret got: %v", err)
	}

	h.registerNode(testNode("n1")) // 4: the node itself comes back
	if id := h.identity("n1"); id == nil || id.CreateIndex != 1 || id.DeregisterIndex != 0 || id.ModifyIndex != 4 {
		t.Fatalf("identity after the node came back exp: same generation 1, not deregistered got: %+v", id)
	}
	if gen, ok := h.f.State().NodeGeneration("n1"); !ok || gen != 1 {
		t.Fatalf("generation exp: 1 got: %d %v", gen, ok)
	}
}

// Purge: refused while the node is registered and for an ID nobody holds;
// after it, another secret may register the ID as a new generation.
func TestNodeIdentity_Purge(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1")) // 1
	err := h.mustRefuse(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "n1"}, structs.CodeConflict)
	if !strings.Contains(err.Error(), "deregister it first") {
		t.Fatalf("purge of a registered node exp: deregister it first got: %v", err)
	}
	h.mustRefuse(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "nobody"}, structs.CodeNotFound)
	h.mustRefuse(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: ""}, structs.CodeInvalid)
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	h.mustApply(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "n1"})
	if id := h.identity("n1"); id != nil {
		t.Fatalf("identity after purge exp: none got: %+v", id)
	}
	if _, ok := h.f.State().NodeGeneration("n1"); ok {
		t.Fatalf("generation after purge exp: none got: one")
	}
	h.mustRefuse(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "n1"}, structs.CodeNotFound)
	newcomer := testNode("n1")
	newcomer.SecretID = "another-secret"
	h.registerNode(newcomer)
	if gen, ok := h.f.State().NodeGeneration("n1"); !ok || gen != h.index {
		t.Fatalf("generation after re-registration exp: new, %d got: %d %v", h.index, gen, ok)
	}
	// The newcomer's own deregistration reserves the ID for its secret.
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	if id := h.identity("n1"); id == nil || !id.Holds("another-secret") || id.Holds("secret-n1") {
		t.Fatalf("reservation of the newcomer exp: bound to its secret got: %+v", id)
	}
}

// The claims of a purged node are not the newcomer's: a claim taken
// before the ID's current generation belongs to an earlier holder.
func TestNodeIdentity_ClaimsOfAPurgedNodeAreNotTheNewcomers(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	past := h.volume("v1").PastClaims["a1"]
	if past == nil {
		t.Fatalf("claim after deregistration exp: past got: %+v", h.volume("v1"))
	}
	// The node itself coming back holds the same generation: its claim.
	h.registerNode(testNode("n1"))
	gen, _ := h.f.State().NodeGeneration("n1")
	if !structs.ClaimOfIdentity(past, gen) {
		t.Fatalf("claim %d of the node that came back (generation %d) exp: its own got: another's", structs.ClaimTakenIndex(past), gen)
	}
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	h.mustApply(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "n1"})
	newcomer := testNode("n1")
	newcomer.SecretID = "another-secret"
	h.registerNode(newcomer)
	gen, _ = h.f.State().NodeGeneration("n1")
	if structs.ClaimOfIdentity(h.volume("v1").PastClaims["a1"], gen) {
		t.Fatalf("claim of the purged node exp: not the newcomer's (generation %d) got: the newcomer's", gen)
	}
}

// A cluster that never deregistered a node has no reservation rows, so
// its state and snapshot bytes are what they were before reservations.
func TestNodeIdentity_NoRowsWithoutDeregistration(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerNode(testNode("n1"))
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown})
	counts, err := CountSnapshot(bytes.NewReader(mustSnapshotBytes(t, h.f)))
	if err != nil || counts[TableNodeIdentities] != 0 {
		t.Fatalf("reservations exp: none got: %v %v", counts, err)
	}
	if idx := h.f.State().TableIndex(TableNodeIdentities); idx != 0 {
		t.Fatalf("reservation table index exp: never written got: %d", idx)
	}
}

// Reservations survive a snapshot and restore byte for byte, and a
// restored store refuses the impostor as the original did.
func TestNodeIdentity_SurvivesSnapshotRestore(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerNode(testNode("n2"))
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1", "n2"}})
	h.registerNode(testNode("n2")) // back: its reservation stays
	snap := mustSnapshotBytes(t, h.f)
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2"} {
		want, _ := h.f.State().NodeIdentity(nil, id)
		got, _ := restored.State().NodeIdentity(nil, id)
		if got == nil || *got != *want {
			t.Fatalf("identity %s after restore exp: %+v got: %+v", id, want, got)
		}
	}
	if again := mustSnapshotBytes(t, restored); !bytes.Equal(again, snap) {
		t.Fatalf("snapshot of the restored store exp: the same bytes got: different")
	}
	counts, err := CountSnapshot(bytes.NewReader(snap))
	if err != nil || counts[TableNodeIdentities] != 2 {
		t.Fatalf("snapshot count exp: 2 node identities got: %v %v", counts, err)
	}
	d1, _ := h.f.State().Digest()
	d2, _ := restored.State().Digest()
	if d1.SHA256 != d2.SHA256 {
		t.Fatalf("digest after restore exp: %s got: %s", d1.SHA256, d2.SHA256)
	}
	// The digest covers the reservations: a purge changes it.
	h.mustApply(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "n1"})
	if d3, _ := h.f.State().Digest(); d3.SHA256 == d1.SHA256 {
		t.Fatalf("digest after a purge exp: changed got: the same")
	}

	// The restored store refuses the impostor as the original did.
	r := &harness{t: t, f: restored, index: h.index}
	impostor := testNode("n1")
	impostor.SecretID = "attacker-secret"
	r.mustRefuse(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: impostor}, structs.CodePermissionDenied)
}

// Every replica refuses a node detach recorded for a claim whose node ID
// was purged and registered again: only a forced checkpoint moves it.
func TestNodeIdentity_CheckpointRefusesANodeDetachOfAPurgedNodesClaim(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	h.mustApply(structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "n1"})
	newcomer := testNode("n1")
	newcomer.SecretID = "another-secret"
	h.registerNode(newcomer)
	for _, req := range []*structs.ClaimCheckpointRequest{
		{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached, NodeDetached: true},
		{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed, NodeDetached: true},
	} {
		err := h.mustRefuse(structs.ClaimCheckpointRequestType, req, structs.CodeConflict)
		if !strings.Contains(err.Error(), "purged") {
			t.Fatalf("node detach of the purged node's claim exp: refused (purged) got: %v", err)
		}
	}
	h.mustApply(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateNodeDetached, ForcedSkip: true})
	if c := h.volume("v1").PastClaims["a1"]; c == nil || c.State != structs.ClaimStateNodeDetached || !c.NodeDetachSkipped {
		t.Fatalf("forced claim exp: node-detached, skip recorded got: %+v", c)
	}
}
