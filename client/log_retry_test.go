package client

import (
	"net/rpc"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/structs"
)

// A follower that has not applied the node's registration yet is not a
// warning at start; any other failure of a retried call is (issue 30).
func TestLogRetry_NotYetKnownIsNotAWarning(t *testing.T) {
	var out strings.Builder
	logger := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
	// As it arrives from the server: flattened to text by net/rpc, as the
	// endpoint made it.
	wire := rpc.ServerError(structs.NodeNotYetKnownError("Alloc.List", "n1").Error())
	logRetry(logger, wire, "watching allocations failed; retrying")
	if out.Len() != 0 {
		t.Fatalf("not yet known exp: nothing at info got: %s", out.String())
	}
	logRetry(logger, structs.NewError(structs.CodeUnavailable, "dial 10.0.0.1:4647: connection refused"), "heartbeat failed; retrying")
	if !strings.Contains(out.String(), "[WARN]  heartbeat failed; retrying") {
		t.Fatalf("other failure exp: a warning got: %q", out.String())
	}
}
