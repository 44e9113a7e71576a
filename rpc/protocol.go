package rpc

import (
	"crypto/tls"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
)

// Protocol is the first byte a dialer writes on a new connection.
type Protocol byte

const (
	// ProtoRPC is one msgpack RPC stream on the raw connection.
	ProtoRPC Protocol = 0x01
	// ProtoRaft hands the connection to the Raft transport.
	ProtoRaft Protocol = 0x02
	// ProtoMux opens a yamux session; every stream carries msgpack RPC, and
	// the accepting server may open streams back towards the dialer.
	ProtoMux Protocol = 0x03
	// ProtoTLS wraps the connection in TLS, then the inner byte follows.
	ProtoTLS Protocol = 0x04
	// ProtoSnapshot carries one snapshot save or restore (package
	// snapshot): archives are larger than one RPC request may be.
	ProtoSnapshot Protocol = 0x05
)

func (p Protocol) String() string {
	switch p {
	case ProtoRPC:
		return "rpc"
	case ProtoRaft:
		return "raft"
	case ProtoMux:
		return "mux"
	case ProtoTLS:
		return "tls"
	case ProtoSnapshot:
		return "snapshot"
	}
	return "unknown"
}

// MaxRequestBytes bounds one request (header and body) read by a server.
// The largest legitimate request is a batch registration; 8 MiB leaves room
// for thousands of volumes while capping what a bad frame can cost.
const MaxRequestBytes = 8 << 20

// YamuxConfig is the one yamux configuration for both ends of a session.
// Keepalives detect a dead peer behind a silent network (a partition sends
// no RST) within about KeepAliveInterval+ConnectionWriteTimeout.
//
// yamux's own limits do not bound what a session holds on a server, so
// the server bounds it itself (limits.go): AcceptBacklog (256) bounds only
// streams not yet accepted, and ServeStreams accepts at once, so the cap
// on streams per session is MaxStreamsPerSession; the receive window
// (MaxStreamWindowSize) cannot be set below its 256 KiB default, so each
// stream may buffer that much, which is why streams the server has given
// up on are drained rather than left full, and why idle streams let go
// of their receive buffer after a large request.
func YamuxConfig(logger hclog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = nil
	cfg.Logger = logger.Named("yamux").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	cfg.KeepAliveInterval = 5 * time.Second
	cfg.ConnectionWriteTimeout = 5 * time.Second
	cfg.StreamOpenTimeout = 10 * time.Second
	cfg.StreamCloseTimeout = 30 * time.Second
	return cfg
}

// NewYamuxServer starts the accepting end of a yamux session on conn
// (after the protocol byte).
func NewYamuxServer(conn net.Conn, logger hclog.Logger) (*yamux.Session, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	g := newStreamGuard()
	sess, err := yamux.Server(coalesceFrames(&guardedConn{Conn: closeAtOnce(conn), g: g}), YamuxConfig(logger))
	if err != nil {
		return nil, err
	}
	guards.Store(sess, g)
	return sess, nil
}

// closeAtOnce makes closing a TLS connection close its socket first. A
// tls.Conn's Close sends a close_notify alert, which waits (up to 5 s)
// for a write in progress and for the peer to take the alert; a peer that
// stops reading (a flood that never reads its answers) kept a session's
// Close waiting that long, and meanwhile every goroutine reading one of
// its streams spun in yamux's Stream.Read on the closed session's
// channel (issue 38: the leader's CPU went to that, and it lost its
// leadership). A session is closed when it has failed or must go: the
// alert is not worth waiting for.
func closeAtOnce(conn net.Conn) net.Conn {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return conn
	}
	return &abruptTLSConn{Conn: tc, raw: tc.NetConn()}
}

type abruptTLSConn struct {
	net.Conn
	raw net.Conn
}

func (c *abruptTLSConn) Close() error {
	err := c.raw.Close()
	_ = c.Conn.Close() // fails at once on the closed socket
	return err
}

// discard is a yamux logger sink for callers without an hclog logger.
var _ io.Writer = io.Discard
