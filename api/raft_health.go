package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// RaftHealth returns the leader's view of every server: last contact with
// the leader, log lag, and a health verdict (needs operator:read). Always
// answered by the leader.
func (c *Client) RaftHealth(ctx context.Context) (*structs.RaftHealthResponse, error) {
	var out structs.RaftHealthResponse
	err := c.Call(ctx, "Operator.RaftHealth", &structs.GenericRequest{}, &out)
	return &out, err
}
