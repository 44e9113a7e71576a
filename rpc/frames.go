package rpc

import (
	"encoding/binary"
	"net"
)

// yamux frame header layout (version 0): version, type, flags (2 bytes),
// stream ID (4), length (4). A data frame's length is its body's size.
const (
	yamuxHeaderSize = 12
	yamuxVersion    = 0
	yamuxTypeData   = 0
)

// frameCoalescingConn joins each yamux data-frame header with the body
// that follows it into one write. yamux's send loop writes a frame as two
// writes, header then body; on loopback every write is a TCP segment that
// wakes the reader, which reads the 12-byte header, finds the body not
// there yet, parks and is woken again. One write per frame halves the
// segments, the reader's wake-ups and the send syscalls of every RPC.
//
// Only yamux's send loop writes to the conn, one goroutine, so pending
// needs no lock. A header is held back only when it announces a body (a
// data frame with a non-zero length); everything else, and a body whose
// size does not match the held header, is written as it comes, so the
// bytes on the wire are exactly yamux's in every case.
type frameCoalescingConn struct {
	net.Conn
	pending []byte // a held data-frame header, or nil
	buf     []byte
}

// coalesceFrames wraps the conn of a yamux session.
func coalesceFrames(conn net.Conn) net.Conn {
	return &frameCoalescingConn{Conn: conn}
}

func (c *frameCoalescingConn) Write(p []byte) (int, error) {
	if c.pending == nil {
		if announcesBody(p) {
			c.pending = append(c.buf[:0], p...)
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	hdr := c.pending
	c.pending = nil
	if uint32(len(p)) != binary.BigEndian.Uint32(hdr[8:12]) {
		// Not the body the header announced: send both as they came.
		if _, err := c.Conn.Write(hdr); err != nil {
			return 0, err
		}
		return c.Conn.Write(p)
	}
	c.buf = append(hdr, p...)
	n, err := c.Conn.Write(c.buf)
	// The caller asked to write p; the header was acknowledged earlier.
	n = max(n-len(hdr), 0)
	c.buf = c.buf[:0]
	return n, err
}

func announcesBody(p []byte) bool {
	return len(p) == yamuxHeaderSize && p[0] == yamuxVersion && p[1] == yamuxTypeData &&
		binary.BigEndian.Uint32(p[8:12]) > 0
}
