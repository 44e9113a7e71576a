package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// The typed indexers replace memdb.StringFieldIndex; keys must be the same
// bytes, or lookups by argument would miss rows indexed from objects, and
// an empty field must stay out of the index.
func TestStringIndexer_SameKeysAsStringFieldIndex(t *testing.T) {
	reflective := &memdb.StringFieldIndex{Field: "VolumeID"}
	typed := stringIndexer[structs.Eval]{name: "volume_id", field: func(e *structs.Eval) string { return e.VolumeID }}
	for _, id := range []string{"", "v", "vol-1", "vol-10", "ünï\x01code"} {
		e := &structs.Eval{VolumeID: id}
		wantOK, want, wantErr := reflective.FromObject(e)
		gotOK, got, gotErr := typed.FromObject(e)
		if gotOK != wantOK || !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("FromObject(%q) = %v %q %v, StringFieldIndex gives %v %q %v", id, gotOK, got, gotErr, wantOK, want, wantErr)
		}
		wantArg, _ := reflective.FromArgs(id)
		gotArg, err := typed.FromArgs(id)
		if err != nil || !bytes.Equal(gotArg, wantArg) {
			t.Errorf("FromArgs(%q) = %q %v, StringFieldIndex gives %q", id, gotArg, err, wantArg)
		}
	}
}

func TestStringIndexer_RefusesWrongTypes(t *testing.T) {
	typed := stringIndexer[structs.Eval]{name: "volume_id", field: func(e *structs.Eval) string { return e.VolumeID }}
	if _, _, err := typed.FromObject(&structs.Volume{ID: "v"}); err == nil || !strings.Contains(err.Error(), "volume_id index") {
		t.Errorf("FromObject(volume) error = %v, want one naming the volume_id index", err)
	}
	for _, args := range [][]any{{}, {"a", "b"}, {7}} {
		if _, err := typed.FromArgs(args...); err == nil || !strings.Contains(err.Error(), "volume_id index") {
			t.Errorf("FromArgs(%v) error = %v, want one naming the volume_id index", args, err)
		}
	}
}

// claim_node keys: one per node, whatever the number of claims it holds,
// in the same (sorted) order however the claim maps iterate.
func TestClaimNodeIndexer_OneSortedKeyPerNode(t *testing.T) {
	claim := func(alloc, node string) *structs.Claim { return &structs.Claim{AllocID: alloc, NodeID: node} }
	v := &structs.Volume{
		ReadClaims:  map[string]*structs.Claim{"a1": claim("a1", "n2"), "a2": claim("a2", "n10"), "a3": claim("a3", "n2")},
		WriteClaims: map[string]*structs.Claim{"a4": claim("a4", "n3")},
		PastClaims:  map[string]*structs.Claim{"a5": claim("a5", "n10")},
	}
	for range 20 { // map order varies run to run; the keys must not
		ok, keys, err := claimNodeIndexer{}.FromObject(v)
		if err != nil || !ok {
			t.Fatalf("FromObject = %v, %v", ok, err)
		}
		want := [][]byte{[]byte("n10\x00"), []byte("n2\x00"), []byte("n3\x00")}
		if len(keys) != len(want) {
			t.Fatalf("keys = %q, want %q", keys, want)
		}
		for i := range want {
			if !bytes.Equal(keys[i], want[i]) {
				t.Fatalf("keys = %q, want %q", keys, want)
			}
		}
	}
	if ok, keys, err := (claimNodeIndexer{}).FromObject(&structs.Volume{ID: "unclaimed"}); ok || keys != nil || err != nil {
		t.Errorf("unclaimed volume: %v %q %v, want no keys", ok, keys, err)
	}
}
