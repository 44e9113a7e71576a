package fsm

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// aclBootstrapKey is the index-table row that records the Raft index of the
// ACL bootstrap (0: never bootstrapped). It is not a table name, so no
// blocking query waits on it.
const aclBootstrapKey = "acl-bootstrap"

// secretKey is what the secret index stores and looks up.
func secretKey(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// ACLTokenBySecret returns the token whose secret is secret, or nil. The
// lookup goes by the secret's hash and the final comparison is in constant
// time.
func (s *StateStore) ACLTokenBySecret(ws memdb.WatchSet, secret string) (*structs.ACLToken, error) {
	if secret == "" {
		return nil, nil
	}
	t, err := firstAs[structs.ACLToken](s.first(ws, TableACLTokens, indexSecret, secretKey(secret)))
	if err != nil || t == nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(t.SecretID), []byte(secret)) != 1 {
		return nil, nil
	}
	return t, nil
}

// ACLTokenByAccessor returns a token by its public ID, or nil.
func (s *StateStore) ACLTokenByAccessor(ws memdb.WatchSet, accessor string) (*structs.ACLToken, error) {
	return firstAs[structs.ACLToken](s.first(ws, TableACLTokens, indexID, accessor))
}

// ACLTokens returns every token sorted by accessor ID (with secrets: the
// caller sanitizes).
func (s *StateStore) ACLTokens(ws memdb.WatchSet) ([]*structs.ACLToken, error) {
	return listAs[structs.ACLToken](s.list(ws, TableACLTokens, indexID))
}

// ACLPolicyByName returns a policy, or nil.
func (s *StateStore) ACLPolicyByName(ws memdb.WatchSet, name string) (*structs.ACLPolicy, error) {
	return firstAs[structs.ACLPolicy](s.first(ws, TableACLPolicies, indexID, name))
}

// ACLPolicies returns every policy sorted by name.
func (s *StateStore) ACLPolicies(ws memdb.WatchSet) ([]*structs.ACLPolicy, error) {
	return listAs[structs.ACLPolicy](s.list(ws, TableACLPolicies, indexID))
}

// ServerToken returns the cluster's server token, or nil before a leader
// created it.
func (s *StateStore) ServerToken() *structs.ACLToken {
	tokens, err := s.ACLTokens(nil)
	if err != nil {
		return nil
	}
	for _, t := range tokens {
		if t.Type == structs.ACLTokenServer {
			return t
		}
	}
	return nil
}

// ACLBootstrapIndex is the Raft index of the ACL bootstrap, 0 if none.
func (s *StateStore) ACLBootstrapIndex() uint64 { return s.TableIndex(aclBootstrapKey) }

// ACLIndex is the newest write to tokens or policies: resolved tokens
// cached at an older index are stale.
func (s *StateStore) ACLIndex() uint64 {
	tokens, policies := s.TableIndex(TableACLTokens), s.TableIndex(TableACLPolicies)
	if tokens > policies {
		return tokens
	}
	return policies
}
