package watcher

import (
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// The claims of a node whose ID an operator purged are never node-detached
// through the node that registers the ID next, under any policy: it never
// had the volume mounted for them, and its "done" would free a volume the
// old node may still be writing to (issue 38). They wait for -force.
func TestWatcher_PurgedNodesClaimIsNotReleasedThroughTheNewcomer(t *testing.T) {
	for _, policy := range []structs.NodeLostPolicy{structs.NodeLostWait, structs.NodeLostFence} {
		t.Run(string(policy), func(t *testing.T) {
			l := fsmtest.New()
			setupLost(t, l, policy)
			l.Must(t, structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
			l.Must(t, structs.NodePurgeRequestType, &structs.NodePurgeRequest{NodeID: "n1"})
			info := &structs.CSIInfo{PluginID: "p", Healthy: true, RequiresControllerPlugin: true, ExternalNodeID: "ext-n1"}
			l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
				ID: "n1", SecretID: "the-newcomer's", Status: structs.NodeStatusReady, Lease: 5 * time.Second,
				CSINodePlugins: map[string]*structs.CSIInfo{"p": info}}})
			leases := &manualLeases{}
			leases.set(time.Now().Add(-time.Minute), true) // a fence would be due at once
			w, csi := startLeaseWatcher(t, l, leases)
			st := waitAttempts(t, w, 2)
			if !strings.Contains(st.LastError, "purged") || !strings.Contains(st.LastError, "-force") {
				t.Fatalf("release status exp: waits for -force because the ID was purged got: %+v", st)
			}
			if calls := csi.log(); len(calls) != 0 {
				t.Fatalf("CSI calls exp: none (no node detach to the newcomer, no controller detach) got: %v", calls)
			}
			v, _ := l.State().VolumeByID(nil, "v1")
			if c := v.PastClaims["a1"]; c == nil || c.State != structs.ClaimStateUnpublishing {
				t.Fatalf("claim exp: still unpublishing got: %+v", v.PastClaims)
			}
		})
	}
}

// The node itself coming back after a deregistration (its own secret) is
// the same identity and releases its own claims as before.
func TestWatcher_NodeBackWithItsOwnSecretReleasesItsClaims(t *testing.T) {
	l := fsmtest.New()
	setupLost(t, l, structs.NodeLostWait)
	l.Must(t, structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	info := &structs.CSIInfo{PluginID: "p", Healthy: true, RequiresControllerPlugin: true, ExternalNodeID: "ext-n1"}
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "n1", SecretID: "s", Status: structs.NodeStatusReady, Lease: 5 * time.Second,
		CSINodePlugins: map[string]*structs.CSIInfo{"p": info}}})
	_, csi := startLeaseWatcher(t, l, &manualLeases{})
	testutil.WaitFor(t, 5*time.Second, func() error { return freed(l) })
	if got := csi.log(); len(got) != 2 || got[0] != "node a1" {
		t.Fatalf("calls exp: [node a1, controller ext-n1] got: %v", got)
	}
}
