package endpoints

import (
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/acl"
	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// ACL manages ACL policies and tokens. Every write is one Raft entry; a
// token's secret is returned once, to the caller that created it.
type ACL struct {
	srv  *Deps
	auth *authz
}

// maxTokenTTL bounds a token's lifetime when one is asked for.
const maxTokenTTL = 10 * 365 * 24 * time.Hour

// Bootstrap creates the first management token, once per cluster. After
// that it is refused, naming the reset index; writing that index to the
// file acl-bootstrap-reset in the leader's data dir allows one more
// bootstrap (docs/security.md).
func (a *ACL) Bootstrap(args *structs.ACLBootstrapRequest, reply *structs.ACLTokenResponse) error {
	_, done, err := a.auth.gate("ACL.Bootstrap", args, reply, nil)
	if done {
		return err
	}
	tok := &structs.ACLToken{
		AccessorID: structs.NewSecret(), SecretID: structs.NewSecret(),
		Name: "Bootstrap Token", Type: structs.ACLTokenManagement, CreateTime: time.Now().UTC(),
	}
	req := &structs.ACLBootstrapRequest{NewToken: tok, ResetIndex: a.srv.ACLResetIndex()}
	_, index, err := a.srv.Apply(structs.ACLBootstrapRequestType, req)
	if err != nil {
		return err
	}
	a.srv.Logger.Info("ACL bootstrap done", "accessor_id", tok.AccessorID, "index", index, "remote", a.auth.conn.Remote)
	tok.CreateIndex, tok.ModifyIndex = index, index
	reply.Token, reply.Index = tok, index
	return nil
}

// PolicyUpsert creates or updates policies; the rules must parse.
func (a *ACL) PolicyUpsert(args *structs.ACLPolicyUpsertRequest, reply *structs.GenericResponse) error {
	_, done, err := a.auth.gate("ACL.PolicyUpsert", args, reply, nil)
	if done {
		return err
	}
	if len(args.Policies) == 0 {
		return structs.Invalid("policies", "at least one policy is required")
	}
	for i, p := range args.Policies {
		if err := p.Validate(); err != nil {
			return structs.Invalid(fmt.Sprintf("policies[%d]", i), err.Error())
		}
		if _, err := acl.Parse(fmt.Sprintf("policy %q", p.Name), []byte(p.Rules)); err != nil {
			return structs.Invalid(fmt.Sprintf("policies[%d].rules", i), err.Error())
		}
	}
	_, index, err := a.srv.Apply(structs.ACLPolicyUpsertRequestType, args)
	reply.Index = index
	return err
}

// PolicyDelete deletes policies. Tokens naming them lose what they granted.
func (a *ACL) PolicyDelete(args *structs.ACLPolicyDeleteRequest, reply *structs.GenericResponse) error {
	_, done, err := a.auth.gate("ACL.PolicyDelete", args, reply, nil)
	if done {
		return err
	}
	if err := validateNames("names", args.Names); err != nil {
		return err
	}
	_, index, err := a.srv.Apply(structs.ACLPolicyDeleteRequestType, args)
	reply.Index = index
	return err
}

// PolicyGet reads one policy.
func (a *ACL) PolicyGet(args *structs.ACLPolicySpecificRequest, reply *structs.ACLPolicyResponse) error {
	c, done, err := a.auth.gate("ACL.PolicyGet", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("name", args.Name); err != nil {
		return err
	}
	return blockingQuery(a.srv, c, "ACL.PolicyGet", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			p, err := state.ACLPolicyByName(ws, args.Name)
			if err != nil {
				return 0, err
			}
			if p == nil {
				return 0, structs.NotFound("ACL policy", args.Name)
			}
			reply.Policy = p
			return p.ModifyIndex, nil
		})
}

// PolicyList lists policies.
func (a *ACL) PolicyList(args *structs.GenericRequest, reply *structs.ACLPolicyListResponse) error {
	c, done, err := a.auth.gate("ACL.PolicyList", args, reply, nil)
	if done {
		return err
	}
	return blockingQuery(a.srv, c, "ACL.PolicyList", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			ps, err := state.ACLPolicies(ws)
			if err != nil {
				return 0, err
			}
			reply.Policies = ps
			return state.TableIndex(fsm.TableACLPolicies), nil
		})
}

// TokenCreate makes a token; its secret is in the reply and nowhere else.
func (a *ACL) TokenCreate(args *structs.ACLTokenCreateRequest, reply *structs.ACLTokenResponse) error {
	_, done, err := a.auth.gate("ACL.TokenCreate", args, reply, nil)
	if done {
		return err
	}
	typ := args.Type
	if typ == "" {
		typ = structs.ACLTokenClient
	}
	if typ == structs.ACLTokenServer {
		return structs.Invalid("type", fmt.Sprintf("%q is not %q or %q", typ, structs.ACLTokenManagement, structs.ACLTokenClient))
	}
	if args.TTL < 0 || args.TTL > maxTokenTTL {
		return structs.Invalid("ttl", fmt.Sprintf("must be between 0 (no expiry) and %s", maxTokenTTL))
	}
	state := a.srv.State()
	for i, name := range args.Policies {
		if err := structs.ValidateID(fmt.Sprintf("policies[%d]", i), name); err != nil {
			return err
		}
		if p, err := state.ACLPolicyByName(nil, name); err != nil {
			return err
		} else if p == nil {
			return structs.Invalid(fmt.Sprintf("policies[%d]", i), fmt.Sprintf("ACL policy %q does not exist", name))
		}
	}
	now := time.Now().UTC()
	tok := &structs.ACLToken{
		AccessorID: structs.NewSecret(), SecretID: structs.NewSecret(), Name: args.Name,
		Type: typ, Policies: args.Policies, CreateTime: now,
	}
	if args.TTL > 0 {
		exp := now.Add(args.TTL)
		tok.ExpirationTime = &exp
	}
	if err := tok.Validate(); err != nil {
		return err
	}
	_, index, err := a.srv.Apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{tok}})
	if err != nil {
		return err
	}
	tok.CreateIndex, tok.ModifyIndex = index, index
	reply.Token, reply.Index = tok, index
	return nil
}

// TokenDelete deletes tokens by accessor ID.
func (a *ACL) TokenDelete(args *structs.ACLTokenDeleteRequest, reply *structs.GenericResponse) error {
	_, done, err := a.auth.gate("ACL.TokenDelete", args, reply, nil)
	if done {
		return err
	}
	if err := validateNames("accessor_ids", args.AccessorIDs); err != nil {
		return err
	}
	_, index, err := a.srv.Apply(structs.ACLTokenDeleteRequestType, args)
	reply.Index = index
	return err
}

// TokenGet reads one token by accessor ID, without its secret.
func (a *ACL) TokenGet(args *structs.ACLTokenSpecificRequest, reply *structs.ACLTokenReadResponse) error {
	c, done, err := a.auth.gate("ACL.TokenGet", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("accessor_id", args.AccessorID); err != nil {
		return err
	}
	return blockingQuery(a.srv, c, "ACL.TokenGet", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			t, err := state.ACLTokenByAccessor(ws, args.AccessorID)
			if err != nil {
				return 0, err
			}
			if t == nil || t.Type == structs.ACLTokenServer {
				return 0, structs.NotFound("ACL token", args.AccessorID)
			}
			reply.Token = t.Sanitize()
			return t.ModifyIndex, nil
		})
}

// TokenList lists tokens without their secrets (the server token is not
// listed: it is the cluster's, not an operator's).
func (a *ACL) TokenList(args *structs.GenericRequest, reply *structs.ACLTokenListResponse) error {
	c, done, err := a.auth.gate("ACL.TokenList", args, reply, nil)
	if done {
		return err
	}
	return blockingQuery(a.srv, c, "ACL.TokenList", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			ts, err := state.ACLTokens(ws)
			if err != nil {
				return 0, err
			}
			reply.Tokens = reply.Tokens[:0]
			for _, t := range ts {
				if t.Type != structs.ACLTokenServer {
					reply.Tokens = append(reply.Tokens, t.Sanitize())
				}
			}
			return state.TableIndex(fsm.TableACLTokens), nil
		})
}

// TokenSelf reads the caller's own token (without its secret).
func (a *ACL) TokenSelf(args *structs.GenericRequest, reply *structs.ACLTokenReadResponse) error {
	_, done, err := a.auth.gate("ACL.TokenSelf", args, reply, nil)
	if done {
		return err
	}
	t, err := a.srv.State().ACLTokenBySecret(nil, args.AuthToken)
	if err != nil {
		return err
	}
	if t == nil || t.Type == structs.ACLTokenServer {
		return structs.NotFound("ACL token", "(self)")
	}
	reply.Token = t.Sanitize()
	reply.Index = t.ModifyIndex
	return nil
}

// validateNames checks a non-empty list of IDs, naming the bad element.
func validateNames(field string, names []string) error {
	if len(names) == 0 {
		return structs.Invalid(field, "at least one is required")
	}
	for i, n := range names {
		if err := structs.ValidateID(fmt.Sprintf("%s[%d]", field, i), n); err != nil {
			return err
		}
	}
	return nil
}
