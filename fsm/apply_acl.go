package fsm

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.ACLBootstrapRequestType, applyACLBootstrap)
	registerCommand(structs.ACLPolicyUpsertRequestType, applyACLPolicyUpsert)
	registerCommand(structs.ACLPolicyDeleteRequestType, applyACLPolicyDelete)
	registerCommand(structs.ACLTokenUpsertRequestType, applyACLTokenUpsert)
	registerCommand(structs.ACLTokenDeleteRequestType, applyACLTokenDelete)
}

// applyACLBootstrap writes the first management token, once per cluster:
// a second bootstrap is refused unless it names the index of the current
// one (the reset procedure, which an operator can only start with access
// to a server's data dir).
func applyACLBootstrap(tx *txn, req *structs.ACLBootstrapRequest) (any, error) {
	if err := req.NewToken.Validate(); err != nil {
		return nil, err
	}
	if req.NewToken.Type != structs.ACLTokenManagement {
		return nil, structs.Invalid("token.type", "the bootstrap token is a management token")
	}
	if done := tableIndexIn(tx, aclBootstrapKey); done != 0 && done != req.ResetIndex {
		return nil, structs.NewError(structs.CodeConflict,
			fmt.Sprintf("ACL bootstrap already done (reset index %d)", done))
	}
	if err := putToken(tx, req.NewToken); err != nil {
		return nil, err
	}
	tx.touched[aclBootstrapKey] = true
	return nil, nil
}

func applyACLPolicyUpsert(tx *txn, req *structs.ACLPolicyUpsertRequest) (any, error) {
	if len(req.Policies) == 0 {
		return nil, structs.Invalid("policies", "at least one policy is required")
	}
	for i, p := range req.Policies {
		if err := p.Validate(); err != nil {
			return nil, structs.Invalid(fmt.Sprintf("policies[%d]", i), err.Error())
		}
		c := *p
		c.CreateIndex, c.ModifyIndex = tx.index, tx.index
		if old, _ := tx.get(TableACLPolicies, indexID, p.Name).(*structs.ACLPolicy); old != nil {
			c.CreateIndex = old.CreateIndex
		}
		tx.put(TableACLPolicies, &c)
	}
	return nil, nil
}

// applyACLPolicyDelete deletes policies. Tokens that name a deleted policy
// keep the name and simply get nothing from it.
func applyACLPolicyDelete(tx *txn, req *structs.ACLPolicyDeleteRequest) (any, error) {
	for _, name := range req.Names {
		old, _ := tx.get(TableACLPolicies, indexID, name).(*structs.ACLPolicy)
		if old == nil {
			return nil, structs.NotFound("ACL policy", name)
		}
		tx.remove(TableACLPolicies, old)
	}
	return nil, nil
}

func applyACLTokenUpsert(tx *txn, req *structs.ACLTokenUpsertRequest) (any, error) {
	if req.IfAbsentType != "" {
		for _, raw := range tx.all(TableACLTokens, indexID) {
			if raw.(*structs.ACLToken).Type == req.IfAbsentType {
				return nil, nil
			}
		}
	}
	for _, t := range req.Tokens {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if err := putToken(tx, t); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func applyACLTokenDelete(tx *txn, req *structs.ACLTokenDeleteRequest) (any, error) {
	for _, id := range req.AccessorIDs {
		old, _ := tx.get(TableACLTokens, indexID, id).(*structs.ACLToken)
		if old == nil || old.Type == structs.ACLTokenServer {
			return nil, structs.NotFound("ACL token", id)
		}
		tx.remove(TableACLTokens, old)
	}
	return nil, nil
}

// putToken writes a token. A secret that another token already has is
// refused (a secret names exactly one token).
func putToken(tx *txn, t *structs.ACLToken) error {
	if other, _ := tx.get(TableACLTokens, indexSecret, secretKey(t.SecretID)).(*structs.ACLToken); other != nil && other.AccessorID != t.AccessorID {
		return structs.NewError(structs.CodeConflict, "a token with this secret already exists")
	}
	c := *t
	c.Policies = append([]string(nil), t.Policies...)
	c.CreateIndex, c.ModifyIndex = tx.index, tx.index
	if old, _ := tx.get(TableACLTokens, indexID, t.AccessorID).(*structs.ACLToken); old != nil {
		c.CreateIndex = old.CreateIndex
	}
	tx.put(TableACLTokens, &c)
	return nil
}

// tableIndexIn reads an index-table row inside a write transaction.
func tableIndexIn(tx *txn, key string) uint64 {
	if e, _ := tx.get(TableIndexes, indexID, key).(*IndexEntry); e != nil {
		return e.Value
	}
	return 0
}
