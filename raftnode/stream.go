package raftnode

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/rpc"
)

// StreamLayer is raft's transport on the shared port. The server's accept
// loop hands it every connection whose first byte is rpc.ProtoRaft; dials
// write that byte. Concurrency: Handoff, Accept, Dial and Close may be called
// from any goroutine.
type StreamLayer struct {
	addr   net.Addr
	dial   rpc.Dialer
	connCh chan net.Conn

	closeOnce sync.Once
	closed    chan struct{}
}

// NewStreamLayer makes a stream layer advertising addr and dialling with
// dial (nil = plain TCP).
func NewStreamLayer(addr net.Addr, dial rpc.Dialer) *StreamLayer {
	return &StreamLayer{
		addr:   addr,
		dial:   dial,
		connCh: make(chan net.Conn, 16),
		closed: make(chan struct{}),
	}
}

// Handoff gives an accepted Raft connection to the transport. It blocks
// until raft takes it or the layer closes (then the conn is closed).
func (s *StreamLayer) Handoff(conn net.Conn) {
	select {
	case s.connCh <- conn:
	case <-s.closed:
		conn.Close()
	}
}

// Accept implements net.Listener.
func (s *StreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.connCh:
		return c, nil
	case <-s.closed:
		return nil, errors.New("raft stream layer closed")
	}
}

// Close implements net.Listener.
func (s *StreamLayer) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// Addr implements net.Listener.
func (s *StreamLayer) Addr() net.Addr { return s.addr }

// Dial implements raft.StreamLayer.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return rpc.DialProtocol(ctx, s.dial, string(address), rpc.ProtoRaft)
}
