package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/claimd/claimd/structs"
)

// PUT|POST /v1/acl/bootstrap: the first management token, with its secret
// (the one time it is shown), as `claimd acl bootstrap -json` prints it.
func (s *Server) aclBootstrap(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.ACLTokenResponse
	if err := s.rpc(r, "ACL.Bootstrap", &structs.ACLBootstrapRequest{}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return out.Token, nil
}

// GET /v1/acl/policies
func (s *Server) aclPolicyList(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.ACLPolicyListResponse
	if err := s.rpc(r, "ACL.PolicyList", &structs.GenericRequest{QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return orEmpty(out.Policies), nil
}

// GET /v1/acl/policy/{name}
func (s *Server) aclPolicyGet(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.ACLPolicyResponse
	if err := s.rpc(r, "ACL.PolicyGet", &structs.ACLPolicySpecificRequest{Name: r.PathValue("name"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Policy, nil
}

// policyBody is a policy as PUT: its rules are the HCL or JSON source that
// `claimd acl policy apply` reads from a file, as one JSON string.
type policyBody struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Rules       string `json:"rules"`
}

// PUT|POST /v1/acl/policy/{name}: create or update; the servers parse and
// check the rules.
func (s *Server) aclPolicyApply(w http.ResponseWriter, r *http.Request) (any, error) {
	var p policyBody
	if err := decodeBody(w, r, &p); err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	if p.Name != "" && p.Name != name {
		return nil, structs.Invalid("name", fmt.Sprintf("%q in the body is not %q of the URL", p.Name, name))
	}
	var out structs.GenericResponse
	args := &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: name, Description: p.Description, Rules: p.Rules}}}
	if err := s.rpc(r, "ACL.PolicyUpsert", args, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}

// DELETE /v1/acl/policy/{name}
func (s *Server) aclPolicyDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.GenericResponse
	if err := s.rpc(r, "ACL.PolicyDelete", &structs.ACLPolicyDeleteRequest{Names: []string{r.PathValue("name")}}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}

// GET /v1/acl/tokens: without secrets.
func (s *Server) aclTokenList(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.ACLTokenListResponse
	if err := s.rpc(r, "ACL.TokenList", &structs.GenericRequest{QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	toks := make([]*structs.ACLToken, 0, len(out.Tokens))
	for _, t := range out.Tokens {
		// The servers send no secret; blanked again so that no future
		// reply can leak one (as the CLI does).
		toks = append(toks, t.Sanitize())
	}
	return toks, nil
}

// tokenBody is a token to create: `claimd acl token create`'s flags.
type tokenBody struct {
	Name     string   `json:"name"`
	Type     string   `json:"type"`
	Policies []string `json:"policies"`
	// TTL is a Go duration ("720h"); "" or "0" never expires.
	TTL string `json:"ttl"`
}

// PUT|POST /v1/acl/token: the new token with its secret, shown this once.
func (s *Server) aclTokenCreate(w http.ResponseWriter, r *http.Request) (any, error) {
	var b tokenBody
	if err := decodeBody(w, r, &b); err != nil {
		return nil, err
	}
	var ttl time.Duration
	if b.TTL != "" {
		var err error
		if ttl, err = time.ParseDuration(b.TTL); err != nil {
			return nil, structs.Invalid("ttl", fmt.Sprintf("%q is not a duration such as 24h", b.TTL))
		}
	}
	var out structs.ACLTokenResponse
	args := &structs.ACLTokenCreateRequest{Name: b.Name, Type: b.Type, Policies: b.Policies, TTL: ttl}
	if err := s.rpc(r, "ACL.TokenCreate", args, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return out.Token, nil
}

// GET /v1/acl/token/self: the caller's own token, without its secret.
func (s *Server) aclTokenSelf(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.ACLTokenReadResponse
	if err := s.rpc(r, "ACL.TokenSelf", &structs.GenericRequest{}, &out); err != nil {
		return nil, err
	}
	return out.Token.Sanitize(), nil
}

// GET /v1/acl/token/{accessor}: without its secret.
func (s *Server) aclTokenGet(w http.ResponseWriter, r *http.Request) (any, error) {
	opts, err := queryOptions(r)
	if err != nil {
		return nil, err
	}
	var out structs.ACLTokenReadResponse
	if err := s.rpc(r, "ACL.TokenGet", &structs.ACLTokenSpecificRequest{AccessorID: r.PathValue("accessor"), QueryOptions: opts}, &out); err != nil {
		return nil, err
	}
	setQueryMeta(w, out.QueryMeta)
	return out.Token.Sanitize(), nil
}

// DELETE /v1/acl/token/{accessor}
func (s *Server) aclTokenDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	var out structs.GenericResponse
	if err := s.rpc(r, "ACL.TokenDelete", &structs.ACLTokenDeleteRequest{AccessorIDs: []string{r.PathValue("accessor")}}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return writeResult{Index: out.Index}, nil
}
