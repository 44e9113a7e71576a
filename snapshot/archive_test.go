package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// sampleState builds a state with rows in every table, through encoded log
// entries as Raft would apply them, and returns its snapshot bytes.
func sampleState(t *testing.T, volumes int) (*fsm.FSM, []byte) {
	t.Helper()
	f := fsm.New(nil)
	var index uint64
	apply := func(mt structs.MessageType, req any) {
		t.Helper()
		data, err := structs.Encode(mt, req)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if resp := f.Apply(&raft.Log{Index: index, Data: data}); resp != nil {
			if err, ok := resp.(error); ok {
				t.Fatalf("apply type %d: exp: success got: %v", mt, err)
			}
		}
	}
	apply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "n1", Name: "n1", SecretID: "node-secret", Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, ExternalNodeID: "ext-n1"}}}})
	var vols []*structs.Volume
	for i := range volumes {
		vols = append(vols, &structs.Volume{ID: fmt.Sprintf("v%03d", i), Name: "vol", ExternalID: fmt.Sprintf("ext-%d", i),
			PluginID: "hostdir", AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
			Secrets: structs.Secrets{"token": "s3cret"}})
	}
	apply(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: vols})
	apply(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{{
		ID: "a1", NodeID: "n1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v000"}}}}})
	apply(structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{
		{VolumeID: "v000", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite},
		{VolumeID: "v000", AllocID: "a1", Release: true}}})
	apply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{
		{Name: "ops", Rules: `operator { policy = "read" }`}}})
	apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{
		{AccessorID: strings.Repeat("a", 36), SecretID: strings.Repeat("s", 36), Name: "ops", Type: structs.ACLTokenClient, Policies: []string{"ops"}}}})
	var buf bytes.Buffer
	if err := f.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return f, buf.Bytes()
}

func sampleMeta() Meta {
	return Meta{ClaimdVersion: "test", Index: 6, Term: 2, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Server: "s1", ServerID: "11111111-2222-3333-4444-555555555555"}
}

func mustArchive(t *testing.T, meta Meta, state []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := Write(&buf, meta, bytes.NewReader(state), int64(len(state))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestArchive_RoundTrip(t *testing.T) {
	f, state := sampleState(t, 20)
	archive := mustArchive(t, sampleMeta(), state)

	var got bytes.Buffer
	info, err := Read(bytes.NewReader(archive), &got)
	if err != nil {
		t.Fatalf("read exp: no error got: %v", err)
	}
	if !bytes.Equal(got.Bytes(), state) {
		t.Fatalf("state exp: the %d bytes written got: %d different bytes", len(state), got.Len())
	}
	sum := sha256.Sum256(state)
	exp := Info{Meta: sampleMeta(), StateSize: int64(len(state)), StateSHA256: hex.EncodeToString(sum[:])}
	exp.Meta.Format = FormatVersion
	if *info != exp {
		t.Fatalf("info exp: %+v got: %+v", exp, *info)
	}

	// The state restores to the same canonical bytes: the archive's
	// checksum is the state digest of a server that restored it.
	restored := fsm.New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(got.Bytes()))); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := restored.WriteSnapshot(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), state) {
		t.Fatal("restored state's snapshot exp: the same bytes got: different bytes")
	}
	if idx := restored.State().LatestIndex(); idx != f.State().LatestIndex() || idx != 6 {
		t.Fatalf("restored latest index exp: 6 got: %d", idx)
	}
}

// Every cut of the archive, at each sixteenth of its length and at the
// last byte, is refused as corrupt.
func TestArchive_TruncatedIsRefused(t *testing.T) {
	_, state := sampleState(t, 200)
	archive := mustArchive(t, sampleMeta(), state)
	cuts := []int{len(archive) - 1}
	for k := range 16 {
		cuts = append(cuts, len(archive)*k/16)
	}
	for _, n := range cuts {
		_, err := Read(bytes.NewReader(archive[:n]), io.Discard)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("archive cut to %d of %d bytes exp: ErrCorrupt got: %v", n, len(archive), err)
		}
	}
}

// Every byte of a sample archive, changed in turn (all its bits flipped),
// makes the archive refused: the gzip header is checked byte for byte, the
// rest by the tar header checksums, the gzip CRC and length, and the
// SHA-256 sums. A single bit changed is refused too, or else it lies in
// deflate's slack (padding bits, code lengths no symbol uses) and the
// archive decodes to exactly the same bytes: an archive is never read as
// anything but what was written.
func TestArchive_FlippedByteIsRefused(t *testing.T) {
	_, state := sampleState(t, 3)
	archive := mustArchive(t, sampleMeta(), state)
	want, err := Read(bytes.NewReader(archive), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	damaged := make([]byte, len(archive))
	var slack int
	for i := range archive {
		for _, mask := range []byte{0xff, 1 << (i % 8)} {
			copy(damaged, archive)
			damaged[i] ^= mask
			var got bytes.Buffer
			info, err := Read(bytes.NewReader(damaged), &got)
			switch {
			case errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion):
			case err == nil && mask != 0xff && *info == *want && bytes.Equal(got.Bytes(), state):
				slack++
			default:
				t.Fatalf("byte %d of %d xor %#x exp: refused got: %v (info %+v)", i, len(archive), mask, err, info)
			}
		}
	}
	t.Logf("archive of %d bytes: every byte flip refused; %d single-bit flips fell in deflate's slack", len(archive), slack)
}

func TestArchive_WrongVersionIsRefused(t *testing.T) {
	_, state := sampleState(t, 1)
	meta := sampleMeta()
	meta.Format = FormatVersion + 1
	meta.ClaimdVersion = "9.9.9"
	archive := mustArchive(t, meta, state)
	_, err := Read(bytes.NewReader(archive), io.Discard)
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("format %d exp: ErrVersion got: %v", meta.Format, err)
	}
	for _, want := range []string{"format 2", "9.9.9", "reads format 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error exp: mentions %q got: %v", want, err)
		}
	}
}

func TestArchive_TrailingDataIsRefused(t *testing.T) {
	_, state := sampleState(t, 1)
	archive := mustArchive(t, sampleMeta(), state)
	_, err := Read(bytes.NewReader(append(append([]byte{}, archive...), 0)), io.Discard)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("archive with a byte after it exp: ErrCorrupt got: %v", err)
	}
	_, err = Read(strings.NewReader("claimd"), io.Discard)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("6-byte file exp: ErrCorrupt, too short got: %v", err)
	}
	_, err = Read(strings.NewReader(strings.Repeat("not an archive", 10)), io.Discard)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "no gzip header") {
		t.Fatalf("text file exp: ErrCorrupt, no gzip header got: %v", err)
	}
}

func TestArchive_StateMustMatchItsSize(t *testing.T) {
	_, state := sampleState(t, 1)
	_, err := Write(io.Discard, sampleMeta(), bytes.NewReader(state[:10]), int64(len(state)))
	if err == nil || !strings.Contains(err.Error(), "ended after 10") {
		t.Fatalf("write of a short state exp: error got: %v", err)
	}
}
