package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Status.* calls: answered by the connected server itself.

// Ping checks that the server answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.Call(ctx, "Status.Ping", &structs.EmptyArgs{}, &struct{}{})
}

// Leader returns the leader's address as the connected server knows it.
func (c *Client) Leader(ctx context.Context) (string, error) {
	out, err := call[string](ctx, c, "Status.Leader", &structs.EmptyArgs{})
	return *out, err
}

// Peers returns the Raft voters' addresses.
func (c *Client) Peers(ctx context.Context) ([]string, error) {
	out, err := call[[]string](ctx, c, "Status.Peers", &structs.EmptyArgs{})
	return *out, err
}

// StateDigest hashes the connected server's state machine.
func (c *Client) StateDigest(ctx context.Context) (*structs.StateDigest, error) {
	return call[structs.StateDigest](ctx, c, "Status.StateDigest", &structs.EmptyArgs{})
}

// Runtime reports the connected server's goroutines and heap.
func (c *Client) Runtime(ctx context.Context) (*structs.RuntimeStats, error) {
	return call[structs.RuntimeStats](ctx, c, "Status.Runtime", &structs.EmptyArgs{})
}
