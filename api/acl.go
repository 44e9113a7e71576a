package api

import (
	"context"
	"time"

	"github.com/claimd/claimd/structs"
)

// ACLBootstrap creates the first management token (once per cluster).
func (c *Client) ACLBootstrap(ctx context.Context) (*structs.ACLToken, error) {
	var out structs.ACLTokenResponse
	err := c.Call(ctx, "ACL.Bootstrap", &structs.ACLBootstrapRequest{}, &out)
	return out.Token, err
}

// ACLPolicyApply creates or updates a policy from its rules (HCL or JSON).
func (c *Client) ACLPolicyApply(ctx context.Context, name, description, rules string) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "ACL.PolicyUpsert", &structs.ACLPolicyUpsertRequest{
		Policies: []*structs.ACLPolicy{{Name: name, Description: description, Rules: rules}}}, &out)
	return out.Index, err
}

// ACLPolicyDelete deletes a policy.
func (c *Client) ACLPolicyDelete(ctx context.Context, name string) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "ACL.PolicyDelete", &structs.ACLPolicyDeleteRequest{Names: []string{name}}, &out)
	return out.Index, err
}

// ACLPolicy reads one policy.
func (c *Client) ACLPolicy(ctx context.Context, name string) (*structs.ACLPolicy, error) {
	var out structs.ACLPolicyResponse
	err := c.Call(ctx, "ACL.PolicyGet", &structs.ACLPolicySpecificRequest{Name: name}, &out)
	return out.Policy, err
}

// ACLPolicies lists policies.
func (c *Client) ACLPolicies(ctx context.Context) ([]*structs.ACLPolicy, error) {
	var out structs.ACLPolicyListResponse
	err := c.Call(ctx, "ACL.PolicyList", &structs.GenericRequest{}, &out)
	return out.Policies, err
}

// ACLTokenCreate creates a token; the returned token carries its secret,
// which the servers never show again. typ "" is a client token; ttl 0 never
// expires.
func (c *Client) ACLTokenCreate(ctx context.Context, name, typ string, policies []string, ttl time.Duration) (*structs.ACLToken, error) {
	var out structs.ACLTokenResponse
	err := c.Call(ctx, "ACL.TokenCreate", &structs.ACLTokenCreateRequest{Name: name, Type: typ, Policies: policies, TTL: ttl}, &out)
	return out.Token, err
}

// ACLTokenDelete deletes a token by accessor ID.
func (c *Client) ACLTokenDelete(ctx context.Context, accessorID string) (uint64, error) {
	var out structs.GenericResponse
	err := c.Call(ctx, "ACL.TokenDelete", &structs.ACLTokenDeleteRequest{AccessorIDs: []string{accessorID}}, &out)
	return out.Index, err
}

// ACLToken reads a token by accessor ID (without its secret).
func (c *Client) ACLToken(ctx context.Context, accessorID string) (*structs.ACLToken, error) {
	var out structs.ACLTokenReadResponse
	err := c.Call(ctx, "ACL.TokenGet", &structs.ACLTokenSpecificRequest{AccessorID: accessorID}, &out)
	return out.Token, err
}

// ACLTokens lists tokens (without secrets).
func (c *Client) ACLTokens(ctx context.Context) ([]*structs.ACLToken, error) {
	var out structs.ACLTokenListResponse
	err := c.Call(ctx, "ACL.TokenList", &structs.GenericRequest{}, &out)
	return out.Tokens, err
}

// ACLTokenSelf reads the caller's own token.
func (c *Client) ACLTokenSelf(ctx context.Context) (*structs.ACLToken, error) {
	var out structs.ACLTokenReadResponse
	err := c.Call(ctx, "ACL.TokenSelf", &structs.GenericRequest{}, &out)
	return out.Token, err
}
