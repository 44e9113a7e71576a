package api

import (
	"context"
	"testing"
	"time"

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

// A refusal with a retry-after hint is waited out (at least the hint),
// unless the context would end first; any other error is not retried here.
func TestWaitRetryAfter(t *testing.T) {
	hint := structs.RetryLater("Volume.List: too many waiting", 100*time.Millisecond)
	began := time.Now()
	if !waitRetryAfter(context.Background(), hint) {
		t.Fatal("refusal with a hint exp: ask again got: give up")
	}
	if took := time.Since(began); took < 100*time.Millisecond || took > 2*time.Second {
		t.Fatalf("wait before asking again exp: 100-125 ms got: %v", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began = time.Now()
	if waitRetryAfter(ctx, hint) || time.Since(began) > 40*time.Millisecond {
		t.Fatalf("hint past the context's end exp: give up at once got: waited %v", time.Since(began))
	}
	if waitRetryAfter(context.Background(), structs.NewError(structs.CodeUnavailable, "budget")) {
		t.Fatal("unavailable without a hint exp: not retried here got: retried")
	}
}
