package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Operator.* calls: the Raft configuration and its health. Archives of
// the whole state are in operator_snapshot.go.

// RaftConfiguration lists the Raft members; stale answers locally.
func (c *Client) RaftConfiguration(ctx context.Context, stale bool) (*structs.RaftConfigurationResponse, error) {
	args := &structs.GenericRequest{QueryOptions: structs.QueryOptions{AllowStale: stale}}
	return call[structs.RaftConfigurationResponse](ctx, c, "Operator.RaftGetConfiguration", args)
}

// RaftRemovePeer removes a server by ID or address.
func (c *Client) RaftRemovePeer(ctx context.Context, id, address string) error {
	_, err := c.write(ctx, "Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: id, Address: address})
	return err
}

// TransferLeadership moves leadership to id ("" = any).
func (c *Client) TransferLeadership(ctx context.Context, id string) error {
	_, err := c.write(ctx, "Operator.TransferLeadership", &structs.TransferLeadershipRequest{ID: id})
	return err
}

// RaftHealth returns the leader's view of every server: last contact with
// the leader, log lag, and a health verdict (needs operator:read). Always
// answered by the leader.
func (c *Client) RaftHealth(ctx context.Context) (*structs.RaftHealthResponse, error) {
	return call[structs.RaftHealthResponse](ctx, c, "Operator.RaftHealth", &structs.GenericRequest{})
}
