package structs

import (
	"errors"
	"strings"
	"testing"
)

func TestClaimState_RankOrder(t *testing.T) {
	for i, s := range ClaimStates {
		if s.Rank() != i {
			t.Fatalf("%s: exp: rank %d got: %d", s, i, s.Rank())
		}
	}
	if ClaimState("sideways").Rank() != -1 || ClaimState("").Valid() {
		t.Fatalf("exp: unknown states invalid got: valid")
	}
}

func TestClaim_CopyIsDeep(t *testing.T) {
	c := &Claim{AllocID: "a1", PublishContext: map[string]string{"k": "v"}}
	cp := c.Copy()
	cp.PublishContext["k"] = "changed"
	if c.PublishContext["k"] != "v" {
		t.Fatalf("exp: original unchanged got: %v", c.PublishContext)
	}
}

func TestVolumeClaimRequest_ValidateNamesField(t *testing.T) {
	for field, r := range map[string]*VolumeClaimRequest{
		"volume_id":       {AllocID: "a", NodeID: "n", Mode: ClaimModeRead},
		"alloc_id":        {VolumeID: "v", NodeID: "n", Mode: ClaimModeRead},
		"node_id":         {VolumeID: "v", AllocID: "a", Mode: ClaimModeRead},
		"mode":            {VolumeID: "v", AllocID: "a", NodeID: "n", Mode: "exclusive"},
		"access_mode":     {VolumeID: "v", AllocID: "a", NodeID: "n", Mode: ClaimModeRead, AccessMode: "x"},
		"attachment_mode": {VolumeID: "v", AllocID: "a", NodeID: "n", Mode: ClaimModeRead, AttachmentMode: "x"},
	} {
		err := r.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field+":") {
			t.Fatalf("%s: exp: invalid naming %s got: %v", field, field, err)
		}
	}
	// A release needs only the volume and the alloc.
	if err := (&VolumeClaimRequest{VolumeID: "v", AllocID: "a", Release: true}).Validate(); err != nil {
		t.Fatalf("release: exp: valid got: %v", err)
	}
}

func TestClaimCheckpointRequest_Validate(t *testing.T) {
	ok := ClaimCheckpointRequest{VolumeID: "v", AllocID: "a", State: ClaimStateFreed}
	if err := ok.Validate(); err != nil {
		t.Fatalf("exp: valid got: %v", err)
	}
	for field, mut := range map[string]func(r *ClaimCheckpointRequest){
		"state":           func(r *ClaimCheckpointRequest) { r.State = "" },
		"expected_state":  func(r *ClaimCheckpointRequest) { r.ExpectedState = "gone" },
		"publish_context": func(r *ClaimCheckpointRequest) { r.PublishContext = map[string]string{"a": "b"} },
	} {
		r := ok
		mut(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), field+":") {
			t.Fatalf("%s: exp: invalid naming it got: %v", field, err)
		}
	}
}

func TestClaimResult_ErrIsTrueNil(t *testing.T) {
	if err := (&ClaimResult{}).Err(); err != nil {
		t.Fatalf("exp: nil error interface got: %#v", err)
	}
	if err := (&ClaimResult{Error: ErrMaxClaims}).Err(); !IsRetryable(err) {
		t.Fatalf("exp: retryable max_claims got: %v", err)
	}
}
