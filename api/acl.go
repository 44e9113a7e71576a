package api

import (
	"context"
	"time"

	"github.com/claimd/claimd/structs"
)

// ACL.* calls: policies and tokens.

// ACLBootstrap creates the first management token (once per cluster).
func (c *Client) ACLBootstrap(ctx context.Context) (*structs.ACLToken, error) {
	out, err := call[structs.ACLTokenResponse](ctx, c, "ACL.Bootstrap", &structs.ACLBootstrapRequest{})
	return out.Token, err
}

// ACLPolicyApply creates or updates a policy from its rules (HCL or JSON).
func (c *Client) ACLPolicyApply(ctx context.Context, name, description, rules string) (uint64, error) {
	return c.write(ctx, "ACL.PolicyUpsert", &structs.ACLPolicyUpsertRequest{
		Policies: []*structs.ACLPolicy{{Name: name, Description: description, Rules: rules}}})
}

// ACLPolicyDelete deletes a policy.
func (c *Client) ACLPolicyDelete(ctx context.Context, name string) (uint64, error) {
	return c.write(ctx, "ACL.PolicyDelete", &structs.ACLPolicyDeleteRequest{Names: []string{name}})
}

// ACLPolicy reads one policy.
func (c *Client) ACLPolicy(ctx context.Context, name string) (*structs.ACLPolicy, error) {
	out, err := call[structs.ACLPolicyResponse](ctx, c, "ACL.PolicyGet", &structs.ACLPolicySpecificRequest{Name: name})
	return out.Policy, err
}

// ACLPolicies lists policies.
func (c *Client) ACLPolicies(ctx context.Context) ([]*structs.ACLPolicy, error) {
	out, err := call[structs.ACLPolicyListResponse](ctx, c, "ACL.PolicyList", &structs.GenericRequest{})
	return out.Policies, err
}

// ACLTokenCreate creates a token; the returned token carries its secret,
// which the servers never show again. typ "" is a client token; ttl 0 never
// expires.
func (c *Client) ACLTokenCreate(ctx context.Context, name, typ string, policies []string, ttl time.Duration) (*structs.ACLToken, error) {
	out, err := call[structs.ACLTokenResponse](ctx, c, "ACL.TokenCreate", &structs.ACLTokenCreateRequest{Name: name, Type: typ, Policies: policies, TTL: ttl})
	return out.Token, err
}

// ACLTokenDelete deletes a token by accessor ID.
func (c *Client) ACLTokenDelete(ctx context.Context, accessorID string) (uint64, error) {
	return c.write(ctx, "ACL.TokenDelete", &structs.ACLTokenDeleteRequest{AccessorIDs: []string{accessorID}})
}

// ACLToken reads a token by accessor ID (without its secret).
func (c *Client) ACLToken(ctx context.Context, accessorID string) (*structs.ACLToken, error) {
	out, err := call[structs.ACLTokenReadResponse](ctx, c, "ACL.TokenGet", &structs.ACLTokenSpecificRequest{AccessorID: accessorID})
	return out.Token, err
}

// ACLTokens lists tokens (without secrets).
func (c *Client) ACLTokens(ctx context.Context) ([]*structs.ACLToken, error) {
	out, err := call[structs.ACLTokenListResponse](ctx, c, "ACL.TokenList", &structs.GenericRequest{})
	return out.Tokens, err
}

// ACLTokenSelf reads the caller's own token.
func (c *Client) ACLTokenSelf(ctx context.Context) (*structs.ACLToken, error) {
	out, err := call[structs.ACLTokenReadResponse](ctx, c, "ACL.TokenSelf", &structs.GenericRequest{})
	return out.Token, err
}
