package adversary

import (
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// A node:write token may report B's allocation terminal, but it cannot
// say that B unmounted the volume (decision 61): only B's own secret
// makes that count. Reported through a follower and through the leader,
// with the statement the servers must still drive their own node detach
// of B's claim, and while B's unmount fails (the volume busy), C never
// gets the single-writer volume. Were the statement honoured, the release
// entry would record node-detached and the claim would move to C at once.
func TestIdentity_NodeWriteTokenCannotSayANodeUnmounted(t *testing.T) {
	for _, via := range []string{"follower", "leader"} {
		t.Run(via, func(t *testing.T) {
			w := newIdentityWorld(t)
			w.c.WaitForHolderDetach(applyWait)
			w.bPlug.SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1 << 20}, FailMessage: map[string]string{"NodeUnpublishVolume": "volume busy"}})
			if _, err := w.mgmt.PlaceAllocs(harness.Ctx(t, time.Minute), &structs.Alloc{ID: "a2", NodeID: w.cID,
				Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
				t.Fatal(err)
			}
			entry := w.leader
			if via == "follower" {
				entry = w.f1
			}
			a := mustDialAs(t, w.c, entry.Addr, tlsutil.RoleClient)
			err := a.call("Node.UpdateAlloc", &structs.AllocClientUpdateRequest{NodeID: w.bID,
				Allocs:       []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientComplete, DetachedVolumes: []string{"v1"}}},
				WriteRequest: structs.WriteRequest{AuthToken: w.nodeWriteToken}}, &structs.GenericResponse{})
			if err != nil {
				t.Fatalf("terminal report of B's a1 with node:write via the %s exp: accepted (the statement dropped) got: %v", via, err)
			}
			w.waitAlloc(t, "a1", structs.AllocClientComplete)
			// The servers try B's node detach, which fails (busy), and keep
			// trying: the claim stays B's, past and not node-detached.
			w.releaseTries(t, 0, 2, "volume busy")
			w.stillHeldByB(t, "after the token's statement")
			w.bPlug.SetControl(hostdir.Control{})
			w.waitAlloc(t, "a2", structs.AllocClientRunning)
			if n := csiCalls(w.bPlug.Audit(), "NodeUnpublishVolume", "ext-v1"); n < 1 {
				t.Fatalf("NodeUnpublish of v1 on B before C got it exp: at least 1 (the servers') got: %d", n)
			}
		})
	}
}
