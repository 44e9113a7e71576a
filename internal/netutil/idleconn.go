// Package netutil holds connection helpers shared by claimd's packages.
package netutil

import (
	"net"
	"time"
)

// IdleConn bounds each Read and Write: a peer that goes silent for longer
// than ReadTimeout (WriteTimeout) fails the call instead of holding it
// forever, however long the whole exchange takes. Zero leaves that
// direction unbounded.
type IdleConn struct {
	net.Conn
	ReadTimeout, WriteTimeout time.Duration
}

// Idle bounds both directions of conn by d.
func Idle(conn net.Conn, d time.Duration) *IdleConn {
	return &IdleConn{Conn: conn, ReadTimeout: d, WriteTimeout: d}
}

func (c *IdleConn) Read(p []byte) (int, error) {
	if c.ReadTimeout > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.ReadTimeout))
	}
	return c.Conn.Read(p)
}

func (c *IdleConn) Write(p []byte) (int, error) {
	if c.WriteTimeout > 0 {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.WriteTimeout))
	}
	return c.Conn.Write(p)
}
