package endpoints

import (
	"errors"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

// A claim whose entry committed must never be answered no_leader: callers
// send a no_leader request again as not applied. The answer says the
// outcome is the caller's to find out (unavailable) and names the publish.
func TestAfterCommit_NoLeaderBecomesUnavailable(t *testing.T) {
	claim := &structs.Claim{VolumeID: "v1", AllocID: "a1"}
	lost := structs.NewError(structs.CodeNoLeader, "leadership changed since this storage operation read the state; nothing was called")
	for _, in := range []error{lost, structs.Wrap(lost, "controller publish of volume \"v1\""), structs.Wrap(lost, "record publish context of volume \"v1\"")} {
		got := afterCommit(claim, in)
		if errors.Is(got, structs.ErrNoLeader) || !errors.Is(got, structs.ErrUnavailable) || !structs.OutcomeUnknown(got) {
			t.Fatalf("afterCommit(%v) exp: unavailable, outcome unknown got: %v", in, got)
		}
		if !strings.Contains(got.Error(), "controller publish") || !strings.Contains(got.Error(), `"v1"`) {
			t.Fatalf("afterCommit(%v) exp: names the volume and the controller publish got: %v", in, got)
		}
	}
	// Anything else passes unchanged: a refusal by the controller (the
	// claim was then released), an in-progress publish, success.
	other := structs.NewError(structs.CodeUnavailable, "controller publish of volume \"v1\" for alloc \"a1\" is in progress; retry")
	if got := afterCommit(claim, other); got != other {
		t.Fatalf("exp: other errors unchanged got: %v", got)
	}
	if got := afterCommit(claim, nil); got != nil {
		t.Fatalf("exp: nil unchanged got: %v", got)
	}
}
