package structs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// ACL token types. A management token may do everything, including
// managing ACLs; a client token may do what its policies grant. A server
// token is the cluster's own identity for server-to-server calls (created
// once by a leader when ACLs are on, kept in the replicated state so every
// leader has it, never listed or shown).
const (
	ACLTokenManagement = "management"
	ACLTokenClient     = "client"
	ACLTokenServer     = "server"
)

// AnonymousPolicy is the policy applied to requests that carry no token. It
// does not exist until an operator writes it, so anonymous requests are
// denied by default.
const AnonymousPolicy = "anonymous"

// ACLPolicy is a named set of rules. Rules is the policy's source (HCL or
// JSON), parsed and checked by package acl before it is written; the state
// machine stores it as text.
type ACLPolicy struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Rules       string `json:"rules"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// maxPolicyBytes bounds a policy's source (package acl refuses more too).
const maxPolicyBytes = 64 << 10

// Validate checks what the state machine relies on; package acl checks the
// rules themselves.
func (p *ACLPolicy) Validate() error {
	if p == nil {
		return Invalid("policy", "must not be null")
	}
	if err := ValidateID("name", p.Name); err != nil {
		return err
	}
	if len(p.Description) > 1024 {
		return Invalid("description", "longer than 1024 bytes")
	}
	if len(p.Rules) > maxPolicyBytes {
		return Invalid("rules", fmt.Sprintf("longer than %d bytes", maxPolicyBytes))
	}
	return nil
}

// ACLToken is a caller's credential. AccessorID is public (it names the
// token in lists and logs); SecretID is the bearer credential, shown only
// to whoever created the token.
type ACLToken struct {
	AccessorID string   `json:"accessor_id"`
	SecretID   string   `json:"secret_id,omitempty"`
	Name       string   `json:"name"`
	Type       string   `json:"type"`
	Policies   []string `json:"policies,omitempty"`
	// ExpirationTime, when set, ends the token: after it the token is
	// treated as unknown. Set by the endpoint from a TTL, so every server
	// applies the same value.
	ExpirationTime *time.Time `json:"expiration_time,omitempty"`
	CreateTime     time.Time  `json:"create_time"`
	CreateIndex    uint64     `json:"create_index"`
	ModifyIndex    uint64     `json:"modify_index"`
}

// Expired reports whether the token has expired at now.
func (t *ACLToken) Expired(now time.Time) bool {
	return t.ExpirationTime != nil && !now.Before(*t.ExpirationTime)
}

// Sanitize returns a copy without the secret: what lists and reads show.
func (t *ACLToken) Sanitize() *ACLToken {
	if t == nil {
		return nil
	}
	c := *t
	c.SecretID = ""
	c.Policies = append([]string(nil), t.Policies...)
	return &c
}

// maxTokenPolicies bounds the policies one token names.
const maxTokenPolicies = 64

// Validate checks a token before it is written.
func (t *ACLToken) Validate() error {
	if t == nil {
		return Invalid("token", "must not be null")
	}
	if err := ValidateID("accessor_id", t.AccessorID); err != nil {
		return err
	}
	if len(t.SecretID) < 32 || len(t.SecretID) > 256 {
		return Invalid("secret_id", "must be 32 to 256 bytes")
	}
	if len(t.Name) > 256 {
		return Invalid("name", "longer than 256 bytes")
	}
	switch t.Type {
	case ACLTokenManagement, ACLTokenServer:
		if len(t.Policies) > 0 {
			return Invalid("policies", fmt.Sprintf("a %s token takes no policies", t.Type))
		}
	case ACLTokenClient:
		if len(t.Policies) == 0 {
			return Invalid("policies", "a client token needs at least one policy")
		}
	default:
		return Invalid("type", fmt.Sprintf("%q is not %q or %q", t.Type, ACLTokenManagement, ACLTokenClient))
	}
	if len(t.Policies) > maxTokenPolicies {
		return Invalid("policies", fmt.Sprintf("%d policies, at most %d", len(t.Policies), maxTokenPolicies))
	}
	for i, p := range t.Policies {
		if err := ValidateID(fmt.Sprintf("policies[%d]", i), p); err != nil {
			return err
		}
	}
	return nil
}

// NewSecret returns a random 128-bit UUID-shaped string for token secrets
// and accessor IDs.
func NewSecret() string {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG does not fail
	}
	h := hex.EncodeToString(raw[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ACLBootstrapRequest creates the first management token. The state machine
// accepts it once per cluster: again only when ResetIndex names the index
// of the current bootstrap (the documented reset procedure).
type ACLBootstrapRequest struct {
	NewToken   *ACLToken
	ResetIndex uint64
	WriteRequest
}

// ACLTokenResponse carries one token (with its secret only for the caller
// that just created it).
type ACLTokenResponse struct {
	Token *ACLToken
	WriteMeta
}

// ACLPolicyUpsertRequest creates or updates policies.
type ACLPolicyUpsertRequest struct {
	Policies []*ACLPolicy
	WriteRequest
}

// ACLPolicyDeleteRequest deletes policies by name.
type ACLPolicyDeleteRequest struct {
	Names []string
	WriteRequest
}

// ACLPolicySpecificRequest reads one policy.
type ACLPolicySpecificRequest struct {
	Name string
	QueryOptions
}

// ACLPolicyResponse is one policy.
type ACLPolicyResponse struct {
	Policy *ACLPolicy
	QueryMeta
}

// ACLPolicyListResponse lists policies.
type ACLPolicyListResponse struct {
	Policies []*ACLPolicy
	QueryMeta
}

// ACLTokenCreateRequest creates a token. The server fills in the IDs, the
// create time and the expiry (from TTL).
type ACLTokenCreateRequest struct {
	Name     string
	Type     string
	Policies []string
	TTL      time.Duration
	WriteRequest
}

// ACLTokenUpsertRequest is the log entry that writes tokens (bootstrap,
// create, the server token).
type ACLTokenUpsertRequest struct {
	Tokens []*ACLToken
	// IfAbsentType writes the tokens only when no token of this type
	// exists (the server token is created once, whichever leader asks).
	IfAbsentType string
	WriteRequest
}

// ACLTokenDeleteRequest deletes tokens by accessor ID.
type ACLTokenDeleteRequest struct {
	AccessorIDs []string
	WriteRequest
}

// ACLTokenSpecificRequest reads one token by accessor ID.
type ACLTokenSpecificRequest struct {
	AccessorID string
	QueryOptions
}

// ACLTokenReadResponse is one token without its secret.
type ACLTokenReadResponse struct {
	Token *ACLToken
	QueryMeta
}

// ACLTokenListResponse lists tokens without secrets.
type ACLTokenListResponse struct {
	Tokens []*ACLToken
	QueryMeta
}
