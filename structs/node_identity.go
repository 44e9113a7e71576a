package structs

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
)

// NodeIdentity is a deregistered node's reservation of its ID: the ID
// stays bound to the secret the node first registered with, for the life
// of the cluster (issue 38), so only the node that holds the secret can
// come back under it (and finish its own releases). While a node is
// registered its node row binds the ID; this row is written when it is
// deregistered, kept when it comes back, and removed only by an
// operator's purge (Node.Purge, management token), which frees the ID.
//
// Only the SHA-256 of the secret is kept: a reservation may outlive the
// node by years, and nothing needs the secret itself once the node is gone
// (the node row keeps it while the node is registered).
type NodeIdentity struct {
	ID string `json:"id"`
	// SecretHash is the hex SHA-256 of the node's secret ID.
	SecretHash string `json:"secret_hash"`
	// CreateIndex is when the ID was first bound to this secret (the first
	// node row's CreateIndex): the identity's generation. A claim taken before it was taken by an
	// earlier holder of the ID (one an operator purged), and this identity
	// may never release it (see ClaimOfIdentity).
	CreateIndex uint64 `json:"create_index"`
	// DeregisterIndex is when the node was last deregistered; 0 while it is
	// registered.
	DeregisterIndex uint64 `json:"deregister_index,omitempty"`
	ModifyIndex     uint64 `json:"modify_index"`
}

// NodeSecretHash is the hex SHA-256 of a node secret, as NodeIdentity
// keeps it.
func NodeSecretHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Holds reports, in constant time, whether secret is this identity's.
func (i *NodeIdentity) Holds(secret string) bool {
	if i == nil || secret == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(i.SecretHash), []byte(NodeSecretHash(secret))) == 1
}

// ClaimTakenIndex is the Raft index at which a claim was taken (its
// CreateIndex, or its first step for a claim without one; 0 if unknown).
func ClaimTakenIndex(c *Claim) uint64 {
	if c.CreateIndex != 0 {
		return c.CreateIndex
	}
	if len(c.Steps) > 0 {
		return c.Steps[0].Index
	}
	return 0
}

// ClaimOfIdentity reports whether a claim was taken by the node identity
// whose generation (NodeIdentity.CreateIndex) is gen: a claim is taken by
// the node registered at that moment, so one taken before gen belonged to
// an earlier holder of the ID. A claim with no index is given the benefit
// of the doubt only when there is no generation either.
func ClaimOfIdentity(c *Claim, gen uint64) bool {
	return ClaimTakenIndex(c) >= gen
}

// NodePurgeRequest removes a deregistered node's reservation of its ID
// (Node.Purge, management token only). The node must not be registered.
type NodePurgeRequest struct {
	NodeID string
	WriteRequest
}

// Validate checks the node ID.
func (r *NodePurgeRequest) Validate() error {
	return ValidateID("node_id", r.NodeID)
}

// NodePurgeResponse says what the purge left behind: the claims the purged
// node still held, which wait for `claimd volume detach -force` and are
// never released by a node that registers the ID again with another
// secret.
type NodePurgeResponse struct {
	NodeID string `json:"node_id"`
	// Claims are the node's past claims still waiting, as volume/alloc.
	Claims []string `json:"claims"`
	// Note says in words what happens to them.
	Note string `json:"note"`
	WriteMeta
}

// PurgeNote is the sentence NodePurgeResponse.Note carries.
func PurgeNote(nodeID string, claims int) string {
	if claims == 0 {
		return fmt.Sprintf("node %s held no claims; its ID is free to register again", nodeID)
	}
	return fmt.Sprintf("node %s's %d claims stay waiting for `claimd volume detach -force VOLUME %s` "+
		"(the volume may still be mounted there); a node that registers the ID %s again, with any secret, "+
		"never releases them", nodeID, claims, nodeID, nodeID)
}
