package rpc

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/claimd/claimd/structs"
)

// Dialer opens a TCP connection. Servers and tests substitute their own (the
// in-process harness routes every dial through a partitionable link).
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// DefaultDialer dials TCP with the context's deadline.
func DefaultDialer(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// DialProtocol dials addr and writes the protocol byte.
func DialProtocol(ctx context.Context, dial Dialer, addr string, p Protocol) (net.Conn, error) {
	if dial == nil {
		dial = DefaultDialer
	}
	conn, err := dial(ctx, addr)
	if err != nil {
		return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("dial %s: %v", addr, err))
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetWriteDeadline(dl)
	}
	if _, err := conn.Write([]byte{byte(p)}); err != nil {
		conn.Close()
		return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("write protocol byte to %s: %v", addr, err))
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}
