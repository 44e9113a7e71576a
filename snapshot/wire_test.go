package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/claimd/claimd/structs"
)

func TestChunks_RoundTripAndEnd(t *testing.T) {
	data := make([]byte, 3*maxChunkBytes+123)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	var wire bytes.Buffer
	cw := NewChunkWriter(&wire)
	// Writes of odd sizes, as gzip makes them.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+rand.IntN(10000))
		if _, err := cw.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	wire.WriteString("after") // what follows the archive on the stream
	got, err := io.ReadAll(NewChunkReader(&wire))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("chunks exp: %d bytes back got: %d bytes, %v", len(data), len(got), err)
	}
	if rest := wire.String(); rest != "after" {
		t.Fatalf("stream after the end marker exp: untouched got: %q", rest)
	}

	// Cut anywhere before the end marker: an error, never a short archive.
	var full bytes.Buffer
	cw = NewChunkWriter(&full)
	_, _ = cw.Write(data[:1000])
	_ = cw.Close()
	for _, n := range []int{0, 2, 4, 500, full.Len() - 4, full.Len() - 1} {
		_, err := io.ReadAll(NewChunkReader(bytes.NewReader(full.Bytes()[:n])))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("stream cut at %d of %d exp: ErrUnexpectedEOF got: %v", n, full.Len(), err)
		}
	}
}

func TestFrames_RoundTripAndBounds(t *testing.T) {
	var wire bytes.Buffer
	req := Request{Op: OpRestore, AuthToken: "t", Forwarded: true}
	if err := WriteFrame(&wire, req); err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := ReadFrame(&wire, &got); err != nil || got != req {
		t.Fatalf("frame exp: %+v got: %+v %v", req, got, err)
	}
	huge := []byte{0x7f, 0xff, 0xff, 0xff}
	if err := ReadFrame(bytes.NewReader(huge), &got); err == nil {
		t.Fatal("frame claiming 2 GiB exp: refused got: accepted")
	}
	if err := WriteFrame(io.Discard, Request{AuthToken: string(make([]byte, MaxFrameBytes))}); err == nil {
		t.Fatal("frame over the bound exp: refused got: written")
	}

	resp := ResponseFor(structs.NewError(structs.CodePermissionDenied, "no"), 7)
	if err := resp.Err(); !errors.Is(err, structs.ErrPermissionDenied) || resp.Index != 7 {
		t.Fatalf("response error exp: permission_denied at 7 got: %v at %d", err, resp.Index)
	}
	if ok := ResponseFor(nil, 9); ok.Err() != nil || ok.Index != 9 {
		t.Fatalf("success response exp: no error, index 9 got: %+v", ok)
	}
}

// A frame's buffer grows with the bytes that arrive, not with the length
// the peer declares: the request frame is read before any token is
// checked, so a peer that declares the largest frame and sends a few
// bytes must not make the server hold the declared size.
func TestReadFrame_DeclaredLengthIsNotAllocatedUpFront(t *testing.T) {
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], MaxFrameBytes)
	short := append(head[:], make([]byte, 10)...)
	const frames = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range frames {
		var req Request
		if err := ReadFrame(bytes.NewReader(short), &req); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("frame cut short exp: ErrUnexpectedEOF got: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	// Allocated up front, 200 frames would take 200 × 64 KiB = 12.5 MiB.
	if got := after.TotalAlloc - before.TotalAlloc; got > frames*MaxFrameBytes/8 {
		t.Fatalf("reading %d short frames allocated %d bytes, more than an eighth of their declared %d", frames, got, frames*MaxFrameBytes)
	}
}
