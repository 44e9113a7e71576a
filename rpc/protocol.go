package rpc

import (
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
	return yamux.Server(coalesceFrames(conn), YamuxConfig(logger))
}

// discard is a yamux logger sink for callers without an hclog logger.
var _ io.Writer = io.Discard
