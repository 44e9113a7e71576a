package rpc

import (
	"bytes"
	"errors"
	netrpc "net/rpc"
	"strings"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/claimd/claimd/structs"
)

// brokenConn fails every write, as a stream whose session ended does.
type brokenConn struct{}

func (brokenConn) Read([]byte) (int, error)  { return 0, errors.New("session shutdown") }
func (brokenConn) Write([]byte) (int, error) { return 0, errors.New("session shutdown") }
func (brokenConn) Close() error              { return nil }

// bufferConn collects what is written to it.
type bufferConn struct{ bytes.Buffer }

func (*bufferConn) Close() error { return nil }

// TestCodec_FailedAnswerDoesNotSilenceLaterAnswers: an answer that cannot
// be written (its caller left while it was written) fails, and every
// answer written after it on other streams still goes out whole. The
// response encoders are pooled, and a msgpack encoder keeps its first
// error: a spoilt one put back in the pool made later answers fail
// without writing a byte, so the server's callers waited for answers it
// believed sent (the leader stopped answering after a flood's process
// exited, issue 38).
func TestCodec_FailedAnswerDoesNotSilenceLaterAnswers(t *testing.T) {
	// Larger than the response buffer, so the encoder itself meets the
	// write error (a Volume.List answer of 200 volumes is ~50 KB).
	large := strings.Repeat("v", 64<<10)
	for i := range 50 {
		gone := NewLimitedServerCodec(brokenConn{}, RequestLimits{MaxBytes: MaxRequestBytes})
		if err := gone.WriteResponse(&netrpc.Response{ServiceMethod: "Volume.List", Seq: uint64(i)}, &large); err == nil {
			t.Fatalf("answer to a caller that left exp: a write error got: nil")
		}
		var out bufferConn
		live := NewLimitedServerCodec(&out, RequestLimits{MaxBytes: MaxRequestBytes})
		want := "answer-" + strings.Repeat("x", i)
		if err := live.WriteResponse(&netrpc.Response{ServiceMethod: "Status.Leader", Seq: uint64(i)}, &want); err != nil {
			t.Fatalf("answer %d after a failed one exp: written got: %v", i, err)
		}
		dec := codec.NewDecoder(&out.Buffer, structs.MsgpackHandle)
		var resp netrpc.Response
		var got string
		if err := dec.Decode(&resp); err != nil {
			t.Fatalf("answer %d header exp: decoded got: %v (%d bytes written)", i, err, out.Len())
		}
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("answer %d body exp: decoded got: %v", i, err)
		}
		if resp.Seq != uint64(i) || resp.ServiceMethod != "Status.Leader" || got != want {
			t.Fatalf("answer %d exp: Status.Leader seq %d %q got: %s seq %d %q", i, i, want, resp.ServiceMethod, resp.Seq, got)
		}
	}
}
