package testutil

import (
	"io"
	"net"
	"testing"

	"github.com/hashicorp/yamux"
)

// ServeLoopback listens on a loopback port and runs handle for each
// connection, in its own goroutine, until the test ends. It returns the
// address. handle owns the connection.
func ServeLoopback(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return l.Addr().String()
}

// ReadProtocolByte reads the first byte a claimd dialer writes (its
// protocol); it closes c and returns false if there is none.
func ReadProtocolByte(c net.Conn) (byte, bool) {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return 0, false
	}
	return b[0], true
}

// ServeMuxStreams starts the accepting end of a yamux session on c (after
// its protocol byte) and serves each stream with serve, in its own
// goroutine, until the session ends. onSession, if set, is told the
// session first (tests that cut it later).
func ServeMuxStreams(c net.Conn, cfg *yamux.Config, onSession func(*yamux.Session), serve func(net.Conn)) {
	sess, err := yamux.Server(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	if onSession != nil {
		onSession(sess)
	}
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go serve(s)
	}
}
