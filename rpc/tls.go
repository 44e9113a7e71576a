package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/claimd/claimd/structs"
)

// HandshakeTimeout bounds a TLS handshake on the dialling side, so a peer
// that starts one and goes silent holds a goroutine and a socket for at
// most this long. It is also a server's bound unless its configuration
// says otherwise (server.Config.TLSHandshakeTimeout): a client talks to
// many servers and keeps this one.
const HandshakeTimeout = 10 * time.Second

// TLSDialer wraps a dialer so every connection starts with ProtoTLS and a
// TLS handshake; the protocol byte written next (DialProtocol) then goes
// inside TLS. config is called per dial so a reloaded certificate is used
// by the next connection.
//
// With plaintextFallback (the migration mode that accepts both), a peer
// that closes the connection at the TLS byte (a server not yet switched to
// TLS) is dialled again in plaintext. That fallback is a downgrade an
// attacker on the path can force: it is for the minutes of a migration,
// never for a cluster at rest (docs/security.md).
func TLSDialer(base Dialer, config func() *tls.Config, plaintextFallback bool) Dialer {
	if base == nil {
		base = DefaultDialer
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := dialTLS(ctx, base, addr, config())
		if err != nil && plaintextFallback && peerRefusedTLS(err) {
			return base(ctx, addr)
		}
		return conn, err
	}
}

func dialTLS(ctx context.Context, base Dialer, addr string, cfg *tls.Config) (net.Conn, error) {
	raw, err := base(ctx, addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(HandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = raw.SetDeadline(deadline)
	if _, err := raw.Write([]byte{byte(ProtoTLS)}); err != nil {
		raw.Close()
		return nil, fmt.Errorf("write TLS byte to %s: %w", addr, err)
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, &handshakeError{addr: addr, err: err}
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, nil
}

// handshakeError is a failed TLS handshake; its message names the peer and
// what TLS said (never key material: crypto/tls errors carry none).
type handshakeError struct {
	addr string
	err  error
}

func (e *handshakeError) Error() string {
	return fmt.Sprintf("TLS handshake with %s: %v", e.addr, e.err)
}
func (e *handshakeError) Unwrap() error { return e.err }

// peerRefusedTLS: the peer closed or reset the connection instead of
// answering the handshake, which is what a plaintext-only server does with
// the TLS byte.
func peerRefusedTLS(err error) bool {
	var he *handshakeError
	if !errors.As(err, &he) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// ServerHandshake runs the server side of a TLS handshake on conn (after
// the TLS byte) within timeout (the server's configured bound), then reads
// the inner protocol byte. TLS inside TLS is refused.
func ServerHandshake(conn net.Conn, cfg *tls.Config, timeout time.Duration) (*tls.Conn, Protocol, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	tc := tls.Server(conn, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, 0, fmt.Errorf("TLS handshake: %w", err)
	}
	var b [1]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		return nil, 0, fmt.Errorf("read protocol byte inside TLS: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	p := Protocol(b[0])
	if p == ProtoTLS {
		return nil, 0, structs.NewError(structs.CodeInvalid, "TLS inside TLS is refused")
	}
	return tc, p, nil
}
