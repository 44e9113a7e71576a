package server

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/rpc"
)

// firstByteTimeout bounds how long a new connection may stay silent before
// naming its protocol, so idle half-open connections cannot pile up.
const firstByteTimeout = 10 * time.Second

func (s *Server) acceptLoop() {
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			select {
			case <-s.shutdownCh:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.logger.Error("accept failed", "error", err)
			time.Sleep(50 * time.Millisecond) // back off on EMFILE and the like
			continue
		}
		s.goFunc(func() { s.handleConn(conn) })
	}
}

// track remembers open connections so Shutdown can close them.
func (s *Server) track(c net.Conn) bool {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	select {
	case <-s.shutdownCh:
		c.Close()
		return false
	default:
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.connsMu.Lock()
	delete(s.conns, c)
	s.connsMu.Unlock()
}

func (s *Server) handleConn(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(firstByteTimeout))
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})

	switch rpc.Protocol(b[0]) {
	case rpc.ProtoRaft:
		// Raft owns the connection from here.
		s.stream.Handoff(conn)
	case rpc.ProtoRPC:
		if !s.track(conn) {
			return
		}
		defer s.untrack(conn)
		s.newRPCServer(endpoints.ConnInfo{}).ServeCodec(rpc.NewServerCodec(conn, rpc.MaxRequestBytes))
	case rpc.ProtoMux:
		if !s.track(conn) {
			return
		}
		defer s.untrack(conn)
		s.serveMux(conn)
	default:
		s.logger.Warn("unknown protocol byte; closing connection", "byte", b[0], "remote", conn.RemoteAddr())
		conn.Close()
	}
}

// serveMux serves every stream of a yamux session with one rpc.Server.
func (s *Server) serveMux(conn net.Conn) {
	sess, err := rpc.NewYamuxServer(conn, s.logger)
	if err != nil {
		s.logger.Error("yamux session failed", "error", err)
		conn.Close()
		return
	}
	defer func() {
		s.nodes.Conns().RemoveSession(sess)
		sess.Close()
	}()
	rs := s.newRPCServer(endpoints.ConnInfo{Session: sess})
	for {
		stream, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go rs.ServeCodec(rpc.NewServerCodec(stream, rpc.MaxRequestBytes))
	}
}
