package api

import (
	"testing"

	"github.com/claimd/claimd/structs"
)

func TestRetryCall_NoLeaderAlwaysUnknownOutcomeOnlyForIdempotentWrites(t *testing.T) {
	lost := structs.NewError(structs.CodeUnavailable, "leadership lost while committing; the outcome is unknown")
	register := &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "a"}}}
	node := &structs.NodeRegisterRequest{Node: &structs.Node{ID: "n1"}}
	claim := &structs.VolumeClaimRequest{VolumeID: "a", AllocID: "x", NodeID: "n1"}
	for _, c := range []struct {
		method string
		args   any
		err    error
		want   bool
	}{
		{"Volume.Claim", claim, structs.ErrNoLeader, true},
		{"Volume.Claim", claim, lost, false},
		{"Volume.Register", register, lost, true},
		{"Node.Register", node, lost, true},
		{"Node.Register", node, structs.ErrShutdown, true},
		{"Node.Register", node, structs.ErrPermissionDenied, false},
		{"Volume.Register", register, nil, false},
	} {
		if got := retryCall(c.method, c.args, c.err); got != c.want {
			t.Errorf("retryCall(%s, %v) exp: %v got: %v", c.method, c.err, c.want, got)
		}
	}
}
