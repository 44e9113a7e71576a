package rpc

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
)

// recordingConn keeps every Write as it was made.
type recordingConn struct {
	net.Conn
	writes [][]byte
}

func (r *recordingConn) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func header(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:8], 7)
	binary.BigEndian.PutUint32(h[8:12], length)
	return h
}

func TestFrameCoalescing_JoinsADataHeaderWithItsBodyAndKeepsTheBytes(t *testing.T) {
	rec := &recordingConn{}
	c := coalesceFrames(rec)
	body := []byte("hello")
	windowUpdate := header(1, 4096) // no body follows
	wrong := header(yamuxTypeData, 3)
	sent := [][]byte{
		header(yamuxTypeData, uint32(len(body))), body, // joined
		windowUpdate,               // alone
		header(yamuxTypeData, 0),   // a data header without body (FIN): alone
		wrong, []byte("not three"), // a body of another size: both as they came
	}
	var want []byte
	for _, p := range sent {
		if n, err := c.Write(p); err != nil || n != len(p) {
			t.Fatalf("write %x: exp: %d, nil got: %d, %v", p, len(p), n, err)
		}
		want = append(want, p...)
	}
	if got := bytes.Join(rec.writes, nil); !bytes.Equal(got, want) {
		t.Fatalf("exp: the bytes yamux wrote, in order\n want %x\n got  %x", want, got)
	}
	if len(rec.writes) != 5 {
		t.Fatalf("exp: 5 writes (header+body joined, the rest alone) got: %d: %x", len(rec.writes), rec.writes)
	}
	if !bytes.Equal(rec.writes[0], append(header(yamuxTypeData, 5), body...)) {
		t.Fatalf("exp: first write is header+body got: %x", rec.writes[0])
	}
}

// Through real yamux sessions on TCP both ways, calls of every size
// arrive intact.
func TestFrameCoalescing_RPCOverYamuxRoundTrips(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		sess, err := NewYamuxServer(conn, nil)
		if err != nil {
			return
		}
		for {
			s, err := sess.Accept()
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				buf := make([]byte, 1<<20)
				for {
					n, err := s.Read(buf)
					if err != nil {
						return
					}
					if _, err := s.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	mc, err := NewMuxClient(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	s, err := mc.Session().OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, size := range []int{1, 12, 4096, 300_000} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		if _, err := s.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 0, size)
		buf := make([]byte, 64<<10)
		for len(got) < size {
			n, err := s.Read(buf)
			if err != nil {
				t.Fatalf("read after %d of %d bytes: %v", len(got), size, err)
			}
			got = append(got, buf[:n]...)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("size %d: echoed bytes differ", size)
		}
	}
}
