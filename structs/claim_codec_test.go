package structs

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// randomClaimRequest sets every field, each to a value that varies with r,
// so a field the codec forgot shows up as a difference. It fills fields by
// reflection: a field added later is filled too.
func randomClaimRequest(r *rand.Rand) *VolumeClaimRequest {
	req := &VolumeClaimRequest{}
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			switch f.Kind() {
			case reflect.String:
				f.SetString(fmt.Sprintf("%s-%d", v.Type().Field(i).Name, r.Intn(1000)))
			case reflect.Bool:
				f.SetBool(r.Intn(2) == 1)
			case reflect.Int64:
				// A duration (Wait), zero half the time (omitempty).
				f.SetInt(int64(r.Intn(2)) * int64(r.Intn(1e9)))
			case reflect.Uint64:
				// An index (ClaimIndex), zero half the time (omitempty);
				// large ones too, for msgpack's wider encodings.
				f.SetUint(uint64(r.Intn(2)) * uint64(r.Int63()))
			case reflect.Struct:
				fill(f)
			default:
				panic(fmt.Sprintf("randomClaimRequest: fill field %s of kind %s", v.Type().Field(i).Name, f.Kind()))
			}
		}
	}
	fill(reflect.ValueOf(req).Elem())
	return req
}

func reflectEncode(t *testing.T, v any) []byte {
	t.Helper()
	var out []byte
	if err := codec.NewEncoderBytes(&out, MsgpackHandle).Encode(v); err != nil {
		t.Fatal(err)
	}
	return out
}

// The hand-written encoding is byte for byte what reflection writes, so a
// log or a peer from before it reads the same, and it decodes what
// reflection wrote (and itself) to the same values, in a batch too.
func TestVolumeClaimRequestCodec_SameBytesBothWays(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		req := randomClaimRequest(r)
		if i%7 == 0 {
			req = &VolumeClaimRequest{} // empty strings and false
		}
		old := reflectEncode(t, (*plainVolumeClaimRequest)(req))
		now := reflectEncode(t, req)
		if !bytes.Equal(old, now) {
			t.Fatalf("encoding exp: reflection's %x got: %x (for %+v)", old, now, req)
		}
		var fromOld VolumeClaimRequest
		if err := Decode(old, &fromOld); err != nil || !reflect.DeepEqual(&fromOld, req) {
			t.Fatalf("decode of reflection's bytes exp: %+v got: %+v (%v)", req, fromOld, err)
		}
		var byReflection plainVolumeClaimRequest
		if err := Decode(now, &byReflection); err != nil || !reflect.DeepEqual((*VolumeClaimRequest)(&byReflection), req) {
			t.Fatalf("reflection's decode of the new bytes exp: %+v got: %+v (%v)", req, byReflection, err)
		}
	}
	batch := &ClaimBatchRequest{Claims: []*VolumeClaimRequest{randomClaimRequest(r), nil, randomClaimRequest(r)}}
	type plainBatch struct {
		Claims []*plainVolumeClaimRequest
		WriteRequest
	}
	pb := &plainBatch{WriteRequest: WriteRequest{AuthToken: "t"}}
	for _, c := range batch.Claims {
		pb.Claims = append(pb.Claims, (*plainVolumeClaimRequest)(c))
	}
	batch.WriteRequest = pb.WriteRequest
	old, now := reflectEncode(t, pb), reflectEncode(t, batch)
	if !bytes.Equal(old, now) {
		t.Fatalf("batch encoding exp: reflection's got: different bytes")
	}
	var back ClaimBatchRequest
	if err := Decode(old, &back); err != nil || !reflect.DeepEqual(&back, batch) {
		t.Fatalf("batch decode exp: %+v got: %+v (%v)", batch, back, err)
	}
}

// Fields the codec does not know (a newer writer's) are skipped, and a nil
// leaves a field empty, as reflection does.
func TestVolumeClaimRequestCodec_UnknownFieldsAndNils(t *testing.T) {
	in := map[string]any{"VolumeID": "v1", "Future": map[string]any{"x": []any{1, "y"}}, "NodeID": nil, "Release": true}
	raw := reflectEncode(t, in)
	var got VolumeClaimRequest
	if err := Decode(raw, &got); err != nil {
		t.Fatal(err)
	}
	if want := (VolumeClaimRequest{VolumeID: "v1", Release: true}); !reflect.DeepEqual(got, want) {
		t.Fatalf("decode exp: %+v got: %+v", want, got)
	}
	var wrong VolumeClaimRequest
	if err := Decode(reflectEncode(t, map[string]any{"Release": "yes"}), &wrong); err == nil {
		t.Fatal("a string for a bool exp: an error got: none")
	}
}

// The codec writes claimReqFields fields: as many as the struct has
// (flattened), so a new field cannot be left out unnoticed.
func TestVolumeClaimRequestCodec_CoversEveryField(t *testing.T) {
	var count func(reflect.Type) int
	count = func(t reflect.Type) int {
		n := 0
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.Anonymous && f.Type.Kind() == reflect.Struct {
				n += count(f.Type)
			} else {
				n++
			}
		}
		return n
	}
	if n := count(reflect.TypeOf(VolumeClaimRequest{})); n != claimReqFields+claimReqOptional {
		t.Fatalf("VolumeClaimRequest fields exp: %d (the codec's) got: %d: add the new field to claim_codec.go", claimReqFields+claimReqOptional, n)
	}
}

func BenchmarkDecodeVolumeClaimRequest(b *testing.B) {
	req := randomClaimRequest(rand.New(rand.NewSource(1)))
	var raw []byte
	if err := codec.NewEncoderBytes(&raw, MsgpackHandle).Encode((*plainVolumeClaimRequest)(req)); err != nil {
		b.Fatal(err)
	}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out VolumeClaimRequest
			if err := Decode(raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out plainVolumeClaimRequest
			if err := Decode(raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncodeVolumeClaimRequest(b *testing.B) {
	req := randomClaimRequest(rand.New(rand.NewSource(1)))
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeMsgpack(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeMsgpack((*plainVolumeClaimRequest)(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
