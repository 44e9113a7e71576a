package csi

import (
	"context"

	"google.golang.org/grpc/connectivity"
)

// Reconnect makes the connection to the plugin try again now and waits
// until it is ready or ctx ends; it reports whether it is ready.
//
// While a plugin is away, gRPC retries its connection on a backoff that
// starts at 1 s and doubles to 2 min; until the next attempt every call
// fails at once. A plugin that is back (its socket appeared again) would
// wait out whatever was drawn, and so would the release waiting on it
// (issue 41). The agent calls this when it sees the socket come back.
func (c *Client) Reconnect(ctx context.Context) bool {
	c.conn.ResetConnectBackoff()
	c.conn.Connect()
	for {
		s := c.conn.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.Shutdown:
			return false
		}
		// Idle after a failed attempt: ask again (a reset backoff makes
		// the next attempt immediate).
		if s == connectivity.Idle {
			c.conn.Connect()
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			return false
		}
	}
}
