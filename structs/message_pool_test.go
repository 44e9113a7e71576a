package structs

import (
	"bytes"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

func freshEncode(t testing.TB, v any) []byte {
	t.Helper()
	var out []byte
	if err := codec.NewEncoderBytes(&out, MsgpackHandle).Encode(v); err != nil {
		t.Fatal(err)
	}
	return out
}

func sampleEntries() []any {
	claim := &Claim{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: ClaimModeWrite, State: ClaimStateTaken,
		PublishContext: map[string]string{"k": "v"}, CreateIndex: 7, ModifyIndex: 9}
	var many []*VolumeClaimRequest
	for i := 0; i < 300; i++ { // past the 4 KiB the scratch buffer starts with
		many = append(many, &VolumeClaimRequest{VolumeID: fmt.Sprintf("vol-%d", i), AllocID: fmt.Sprintf("alloc-%d", i),
			NodeID: "node-1", Mode: ClaimModeRead, Release: i%2 == 0})
	}
	return []any{
		&ClaimBatchRequest{Claims: many},
		&ClaimBatchRequest{Claims: many[:1]},
		&CheckpointBatchRequest{Checkpoints: []*ClaimCheckpointRequest{{VolumeID: "v1", AllocID: "a1", State: ClaimStateFreed, NodeDetached: true}}},
		&VolumeClaimResponse{Claim: claim, New: true, Volume: &Volume{ID: "v1", WriteClaims: map[string]*Claim{"a1": claim}}},
		&Volume{ID: "v2", Parameters: map[string]string{"a": "b"}},
	}
}

// Reused encoders give the bytes a fresh encoder gives, entry after entry
// (a short one after a long one included), and Decode with reused
// decoders reads them back to equal values.
func TestEncodePooled_SameBytesAsAFreshEncoder(t *testing.T) {
	for round := 0; round < 3; round++ {
		for i, v := range sampleEntries() {
			want := freshEncode(t, v)
			got, err := Encode(ClaimBatchRequestType, v)
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != byte(ClaimBatchRequestType) || !bytes.Equal(got[1:], want) {
				t.Fatalf("round %d entry %d exp: type byte and the fresh encoding (%d bytes) got: %d bytes, equal body %v",
					round, i, len(want), len(got), bytes.Equal(got[1:], want))
			}
			if raw, err := EncodeMsgpack(v); err != nil || !bytes.Equal(raw, want) {
				t.Fatalf("EncodeMsgpack entry %d exp: the fresh encoding got: %d bytes, %v", i, len(raw), err)
			}
			back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := Decode(got[1:], back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, v) {
				t.Fatalf("entry %d exp: decodes to the value encoded got:\n%#v\n%#v", i, back, v)
			}
		}
	}
}

// Encoded entries do not share memory with the pool: a later encode must
// not change an earlier entry (Raft keeps it), and concurrent use is safe.
func TestEncodePooled_EntriesAreNotOverwritten(t *testing.T) {
	entries := sampleEntries()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kept [][]byte
			for i := 0; i < 50; i++ {
				b, err := Encode(ClaimBatchRequestType, entries[i%len(entries)])
				if err != nil {
					t.Error(err)
					return
				}
				kept = append(kept, b)
			}
			for i, b := range kept {
				if want := freshEncode(t, entries[i%len(entries)]); !bytes.Equal(b[1:], want) {
					t.Errorf("entry %d exp: unchanged after later encodes got: changed", i)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkEncodeClaimBatch32(b *testing.B) {
	req := &ClaimBatchRequest{Claims: sampleEntries()[0].(*ClaimBatchRequest).Claims[:32]}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(ClaimBatchRequestType, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeClaimBatch32(b *testing.B) {
	req := &ClaimBatchRequest{Claims: sampleEntries()[0].(*ClaimBatchRequest).Claims[:32]}
	raw := freshEncode(b, req)
	b.ReportAllocs()
	for b.Loop() {
		var out ClaimBatchRequest
		if err := Decode(raw, &out); err != nil {
			b.Fatal(err)
		}
	}
}
