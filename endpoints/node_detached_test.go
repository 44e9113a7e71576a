package endpoints

import (
	"errors"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// A terminal report's "these volumes I node-detached myself" frees the
// claim in the release entry only when the node itself says it (its
// secret: a node:write token cannot know what the node unmounted) and
// every server applies the entry type that honours it (decision 61). In
// every other case the statement is dropped and the claim waits for the
// servers' own node detach, as before.
func TestNodeUpdateAlloc_OnlyTheNodeItselfSaysWhatItDetached(t *testing.T) {
	for _, tc := range []struct {
		name     string
		token    string
		features bool
		want     structs.ClaimState // a1's claim of v1 after the report ("" = freed)
	}{
		{"the node's secret, every server supports it", "s-n1", true, ""},
		{"the node's secret, some server does not", "s-n1", false, structs.ClaimStateUnpublishing},
		{"a node:write token", "nodeW", true, structs.ClaimStateUnpublishing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, true)
			w.cluster.features = tc.features
			w.state.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{
				{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite}}})
			token := tc.token
			if token == "nodeW" {
				token = w.nodeW
			}
			node := w.receivers(w.conn(tlsutil.RoleClient))["Node"].(*Node)
			var reply structs.GenericResponse
			err := node.UpdateAlloc(&structs.AllocClientUpdateRequest{NodeID: "n1",
				Allocs:       []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientComplete, DetachedVolumes: []string{"v1"}}},
				WriteRequest: structs.WriteRequest{AuthToken: token}}, &reply)
			if err != nil {
				t.Fatalf("terminal report exp: accepted got: %v", err)
			}
			v, err := w.state.State().VolumeByID(nil, "v1")
			if err != nil || v == nil {
				t.Fatalf("read v1: %v", err)
			}
			got := structs.ClaimState("")
			if c := v.PastClaims["a1"]; c != nil {
				got = c.State
			} else if v.LiveClaim("a1") != nil {
				got = structs.ClaimStateTaken
			}
			if got != tc.want {
				t.Fatalf("a1's claim after the report exp: %q (\"\" = freed) got: %q", tc.want, got)
			}
		})
	}
}

// A malformed list is refused naming the field, and nothing is applied.
func TestNodeUpdateAlloc_MalformedDetachedListIsRefused(t *testing.T) {
	w := newWorld(t, true)
	w.cluster.features = true
	node := w.receivers(w.conn(tlsutil.RoleClient))["Node"].(*Node)
	var reply structs.GenericResponse
	err := node.UpdateAlloc(&structs.AllocClientUpdateRequest{NodeID: "n1",
		Allocs:       []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientRunning, DetachedVolumes: []string{"v1"}}},
		WriteRequest: structs.WriteRequest{AuthToken: "s-n1"}}, &reply)
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "allocs[0].detached_volumes") {
		t.Fatalf("a running status with a detached list exp: invalid naming allocs[0].detached_volumes got: %v", err)
	}
	a, _ := w.state.State().AllocByID(nil, "a1")
	if a == nil || a.ClientStatus == structs.AllocClientRunning {
		t.Fatalf("a1 after the refused report exp: unchanged got: %+v", a)
	}
}
