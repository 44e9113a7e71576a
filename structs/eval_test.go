package structs

import (
	"regexp"
	"testing"
)

func TestDeriveEvalID_DeterministicAndDistinct(t *testing.T) {
	a, b := DeriveEvalID(42, "v1"), DeriveEvalID(42, "v1")
	if a != b {
		t.Fatalf("exp: same ID for same input got: %s %s", a, b)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(a) {
		t.Fatalf("exp: UUID-shaped got: %s", a)
	}
	if ValidateID("id", a) != nil {
		t.Fatalf("exp: a valid object ID got: %s", a)
	}
	if DeriveEvalID(43, "v1") == a || DeriveEvalID(42, "v2") == a {
		t.Fatalf("exp: distinct IDs for distinct inputs got: collision")
	}
}

func TestEval_Validate(t *testing.T) {
	e := &Eval{ID: "e1", Type: EvalTypeVolumeClaimGC, VolumeID: "v1"}
	if err := e.Validate(); err != nil {
		t.Fatalf("exp: valid got: %v", err)
	}
	bad := *e
	bad.Type = "other"
	if err := bad.Validate(); err == nil {
		t.Fatalf("exp: invalid type refused got: nil")
	}
}
