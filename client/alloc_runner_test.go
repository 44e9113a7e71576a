package client

import (
	"net/rpc"
	"testing"

	"github.com/claimd/claimd/structs"
)

// TestRetryableClaimError_TopologyIsPermanent: a topology refusal, even
// after crossing net/rpc and being wrapped, fails the claim; other
// unschedulable refusals and max_claims (a node at its volume limit) are
// retried.
func TestRetryableClaimError_TopologyIsPermanent(t *testing.T) {
	topo := structs.NewError(structs.CodeUnschedulable, structs.TopologyRefusal+`volume "v1" is accessible from [zone=a]`)
	wire := structs.Wrap(structs.ParseError(rpc.ServerError(topo.Error())), `claim volume "v1"`)
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"topology", topo, false},
		{"topology over the wire, wrapped", wire, false},
		{"node down", structs.NewError(structs.CodeUnschedulable, `node "n1" is down`), true},
		{"node volume limit", structs.NewError(structs.CodeMaxClaims, `node "n1" holds 2 volumes`), true},
		{"invalid", structs.Invalid("mode", "bad"), false},
	} {
		if got := retryableClaimError(c.err); got != c.want {
			t.Fatalf("%s (%v): exp: retryable=%t got: %t", c.name, c.err, c.want, got)
		}
	}
}
