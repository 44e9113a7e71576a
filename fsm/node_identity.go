package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// TableNodeIdentities holds one structs.NodeIdentity per node ID that was
// ever deregistered and not purged since: the ID's binding to its secret,
// which a deregistration does not end (issue 38). While a node is
// registered its node row binds the ID (its SecretID and CreateIndex); the
// row here is written when it is deregistered, kept when it comes back,
// and removed only by an operator's purge. So the table stays as small and
// quiet as the set of nodes that ever left, and a cluster that never
// deregistered a node has the same state (and snapshot bytes) as before.
const TableNodeIdentities = "node_identities"

func nodeIdentitySchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableNodeIdentities, Indexes: map[string]*memdb.IndexSchema{
		indexID: primary(func(i *structs.NodeIdentity) string { return i.ID }),
	}}
}

func init() {
	registerCommand(structs.NodePurgeRequestType, applyNodePurge)
}

func getIdentity(tx *txn, id string) *structs.NodeIdentity {
	i, _ := tx.get(TableNodeIdentities, indexID, id).(*structs.NodeIdentity)
	return i
}

// NodeIdentity returns the reservation of a node ID, or nil, nil when the
// ID is free.
func (s *StateStore) NodeIdentity(ws memdb.WatchSet, id string) (*structs.NodeIdentity, error) {
	return firstAs[structs.NodeIdentity](s.first(ws, TableNodeIdentities, indexID, id))
}

// NodeGeneration is the index at which node ID's current identity was
// bound, or false when nobody holds the ID: the reservation's CreateIndex
// for a node that was ever deregistered, else the node row's CreateIndex
// (which stays the same across the node's re-registrations).
func (s *StateStore) NodeGeneration(id string) (uint64, bool) {
	if i, err := s.NodeIdentity(nil, id); err == nil && i != nil {
		return i.CreateIndex, true
	}
	if n, err := s.NodeByID(nil, id); err == nil && n != nil {
		return n.CreateIndex, true
	}
	return 0, false
}

// identityRefusal is the error for a registration whose secret is not the
// one the ID is bound to. It never says anything about the secret.
func identityRefusal(id string, ident *structs.NodeIdentity) error {
	if ident.DeregisterIndex != 0 {
		return structs.NewError(structs.CodePermissionDenied, fmt.Sprintf(
			"node %q was deregistered and its ID stays reserved for its own secret_id; "+
				"only an operator's `claimd node purge %s` frees it", ident.ID, ident.ID))
	}
	return structs.NewError(structs.CodePermissionDenied, fmt.Sprintf("node %q is registered with another secret_id", ident.ID))
}

// bindIdentity checks a registration against the ID's reservation, if it
// has one, and marks a node that comes back as registered again (its
// generation stays: its old claims are its own to release). An ID without
// a reservation is bound by its node row alone.
func bindIdentity(tx *txn, n *structs.Node) error {
	ident := getIdentity(tx, n.ID)
	if ident == nil {
		return nil
	}
	if !ident.Holds(n.SecretID) {
		return identityRefusal(n.ID, ident)
	}
	if ident.DeregisterIndex == 0 {
		return nil // the usual re-registration: nothing to write
	}
	back := *ident
	back.DeregisterIndex, back.ModifyIndex = 0, tx.index
	tx.put(TableNodeIdentities, &back)
	return nil
}

// reserveIdentity marks a deregistered node's ID reserved for its secret,
// with the node's generation: its first node row's CreateIndex, or the
// reservation it already had from an earlier deregistration.
func reserveIdentity(tx *txn, n *structs.Node) {
	out := &structs.NodeIdentity{ID: n.ID, SecretHash: structs.NodeSecretHash(n.SecretID), CreateIndex: n.CreateIndex}
	if ident := getIdentity(tx, n.ID); ident != nil {
		c := *ident
		out = &c
	}
	out.DeregisterIndex, out.ModifyIndex = tx.index, tx.index
	tx.put(TableNodeIdentities, out)
}

// applyNodePurge removes a deregistered node's reservation. Its past
// claims are left as they are: they were taken before any later holder
// of the ID registered, so the release watcher never sends their node
// detaches to that holder (structs.ClaimOfIdentity), and they wait for an
// operator's `volume detach -force`.
func applyNodePurge(tx *txn, req *structs.NodePurgeRequest) (any, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if getNode(tx, req.NodeID) != nil {
		return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
			"node %q is registered: deregister it first (a purge frees only the ID of a node that is gone)", req.NodeID))
	}
	ident := getIdentity(tx, req.NodeID)
	if ident == nil {
		return nil, structs.NotFound("node identity", req.NodeID)
	}
	tx.remove(TableNodeIdentities, ident)
	return nil, nil
}

// generation is NodeGeneration inside a write transaction.
func generation(tx *txn, id string) (uint64, bool) {
	if i := getIdentity(tx, id); i != nil {
		return i.CreateIndex, true
	}
	if n := getNode(tx, id); n != nil {
		return n.CreateIndex, true
	}
	return 0, false
}

// checkClaimsIdentity refuses a checkpoint that says a claim's node
// detach is done (by the node, or by its lease running out) when the
// claim's node ID now belongs to another identity than the one that took
// the claim: after a purge, whatever registered the ID never had the
// volume mounted for it. Only an operator's force moves such a claim. The
// release watcher does not try (watcher.otherIdentity); this makes the
// rule the same on every replica whatever a leader sends.
func checkClaimsIdentity(tx *txn, c *structs.Claim, req *structs.ClaimCheckpointRequest, name string) error {
	detached := structs.ClaimStateNodeDetached.Rank()
	if req.ForcedSkip || c.State.Rank() >= detached || req.State.Rank() < detached {
		return nil
	}
	gen, held := generation(tx, c.NodeID)
	if !held || structs.ClaimOfIdentity(c, gen) {
		return nil
	}
	return structs.NewError(structs.CodeConflict, fmt.Sprintf(
		"%s was taken by an earlier holder of node ID %s (purged since): only `volume detach -force` releases it", name, c.NodeID))
}
