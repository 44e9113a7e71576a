package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// A claim sent with Wait is held by the leader while the volume is held
// and granted in the same call once the holder's release frees it (issue
// 41): the waiter is woken by the volume's change, not by its own retry
// timer. Without Wait the refusal comes at once.
func TestClaim_WaitIsGrantedWhenTheHolderIsFreed(t *testing.T) {
	e := newReleaseEnv(t, "w1", "w2")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a0", "w1", "v1")
	e.waitAlloc(t, "a0", structs.AllocClientRunning)
	w2 := e.clients["w2"].NodeID()
	if _, err := e.api.PlaceAllocs(harness.Ctx(t, 30*time.Second), &structs.Alloc{ID: "a1", NodeID: w2,
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
		t.Fatal(err)
	}
	claim := func(wait time.Duration) error {
		_, err := e.api.Claim(harness.Ctx(t, 30*time.Second), &structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1",
			NodeID: w2, Mode: structs.ClaimModeWrite, Wait: wait})
		return err
	}
	if err := claim(0); !errors.Is(err, structs.ErrMaxClaims) {
		t.Fatalf("claim without Wait while held exp: max_claims at once got: %v", err)
	}
	done := make(chan error, 1)
	sent := time.Now()
	go func() { done <- claim(structs.MaxClaimWait) }()
	// Held by the leader, not answered yet.
	select {
	case err := <-done:
		t.Fatalf("claim with Wait while held exp: held got: answered %v", err)
	case <-time.After(500 * time.Millisecond): // the claim is meant to block; this is the check, not a wait for something
	}
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a0"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		// w2's agent claims a1 too: the same claim, granted to whichever
		// call comes first, and the other may find its controller publish
		// in progress (unavailable, retry). Either way it was granted.
		if errors.Is(err, structs.ErrUnavailable) && strings.Contains(err.Error(), "publish") {
			err = nil
		}
		if err != nil && !errors.Is(err, structs.ErrMaxClaims) {
			t.Fatalf("claim with Wait exp: granted got: %v", err)
		}
		if err != nil && time.Since(sent) < structs.MaxClaimWait {
			// Refused before its wait was over: the wait was not done.
			t.Fatalf("claim with Wait exp: granted, or refused only after %s got: %v after %s", structs.MaxClaimWait, err, time.Since(sent))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("claim with Wait exp: answered within its bound got: still waiting")
	}
	if c := e.claimOf(t, "v1", "a1"); c == nil || c.State != structs.ClaimStateTaken {
		e.waitAlloc(t, "a1", structs.AllocClientRunning)
	}
}
