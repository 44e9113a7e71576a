package fsm

import (
	"fmt"
	"slices"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.AllocPlaceRequestType, applyAllocPlace)
	registerCommand(structs.AllocStopRequestType, applyAllocStop)
	registerCommand(structs.AllocClientUpdateRequestType, applyAllocClientUpdateWithoutStatements)
	registerCommand(structs.AllocClientUpdateDetachedRequestType, applyAllocClientUpdate)
}

// applyAllocClientUpdateWithoutStatements applies a type-8 update as every
// server has always applied it: DetachedVolumes is not honoured there
// (see applyClaimBatchWithoutStatements).
func applyAllocClientUpdateWithoutStatements(tx *txn, req *structs.AllocClientUpdateRequest) (any, error) {
	for _, u := range req.Allocs {
		if u != nil {
			u.DetachedVolumes = nil
		}
	}
	return applyAllocClientUpdate(tx, req)
}

// applyAllocPlace places allocations on ready nodes. The statuses in the
// request are ignored: a new allocation is always run/pending.
func applyAllocPlace(tx *txn, req *structs.AllocPlaceRequest) (any, error) {
	if len(req.Allocs) == 0 {
		return nil, structs.Invalid("allocs", "must not be empty")
	}
	seen := make(map[string]bool, len(req.Allocs))
	for i, in := range req.Allocs {
		field := fmt.Sprintf("allocs[%d]", i)
		if err := in.Validate(); err != nil {
			return nil, itemError("allocs", i, err)
		}
		if seen[in.ID] {
			return nil, structs.Invalid(field+".id", fmt.Sprintf("%q is given twice", in.ID))
		}
		seen[in.ID] = true
		if old := getAlloc(tx, in.ID); old != nil {
			// An ID names one run: a stopped or finished allocation is never
			// started again, so placing it again is refused with its state
			// (it used to pass as a retry, and nothing ran).
			if old.DesiredStatus == structs.AllocDesiredStop || old.Terminal() {
				return nil, structs.NewError(structs.CodeConflict, fmt.Sprintf(
					"alloc %q exists and is %s (desired %s): an allocation is never started again; place it under a new ID",
					in.ID, old.ClientStatus, old.DesiredStatus))
			}
			if old.NodeID == in.NodeID && slices.EqualFunc(old.Volumes, in.Volumes, sameVolumeRequest) {
				continue // a retried placement
			}
			return nil, structs.NewError(structs.CodeConflict,
				fmt.Sprintf("alloc %q is already placed with another node or volumes", in.ID))
		}
		n := getNode(tx, in.NodeID)
		if n == nil {
			return nil, structs.NotFound("node", in.NodeID)
		}
		if n.Status != structs.NodeStatusReady {
			return nil, structs.NewError(structs.CodeUnschedulable, fmt.Sprintf("node %q is %s", n.ID, n.Status))
		}
		for _, vr := range in.Volumes {
			if getVolume(tx, vr.VolumeID) == nil {
				return nil, structs.NotFound("volume", vr.VolumeID)
			}
		}
		a := in.Copy()
		a.DesiredStatus, a.ClientStatus, a.ClientDescription = structs.AllocDesiredRun, structs.AllocClientPending, ""
		a.CreateIndex, a.ModifyIndex = tx.index, tx.index
		tx.put(TableAllocs, a)
	}
	return nil, nil
}

func sameVolumeRequest(a, b *structs.AllocVolumeRequest) bool { return *a == *b }

// applyAllocStop asks for allocations to stop. Their claims stay until the
// client reports them terminal: the client may still be writing.
func applyAllocStop(tx *txn, req *structs.AllocStopRequest) (any, error) {
	if len(req.AllocIDs) == 0 {
		return nil, structs.Invalid("alloc_ids", "must not be empty")
	}
	for _, id := range sortedUnique(req.AllocIDs) {
		old := getAlloc(tx, id)
		if old == nil {
			return nil, structs.NotFound("alloc", id)
		}
		if old.DesiredStatus == structs.AllocDesiredStop {
			continue
		}
		a := old.Copy()
		a.DesiredStatus = structs.AllocDesiredStop
		a.ModifyIndex = tx.index
		tx.put(TableAllocs, a)
	}
	return nil, nil
}

// applyAllocClientUpdate records client statuses. A terminal status
// releases the allocation's claims and queues their GC evals in the same
// entry, so there is no index at which an allocation is terminal but still
// holds a live claim.
func applyAllocClientUpdate(tx *txn, req *structs.AllocClientUpdateRequest) (any, error) {
	var resp structs.AllocClientUpdateResponse
	if len(req.Allocs) == 0 {
		return nil, structs.Invalid("allocs", "must not be empty")
	}
	seen := make(map[string]bool, len(req.Allocs))
	for i, u := range req.Allocs {
		field := fmt.Sprintf("allocs[%d]", i)
		if u == nil {
			return nil, structs.Invalid(field, "must not be null")
		}
		if err := structs.ValidateID(field+".id", u.ID); err != nil {
			return nil, err
		}
		if !u.ClientStatus.Valid() {
			return nil, structs.Invalid(field+".client_status",
				fmt.Sprintf("%q is not one of %v", u.ClientStatus, structs.AllocClientStatuses))
		}
		if len(u.ClientDescription) > 4096 {
			return nil, structs.Invalid(field+".client_description", "longer than 4096 bytes")
		}
		if seen[u.ID] {
			return nil, structs.Invalid(field+".id", fmt.Sprintf("%q is given twice", u.ID))
		}
		seen[u.ID] = true
		old := getAlloc(tx, u.ID)
		if old == nil {
			return nil, structs.NotFound("alloc", u.ID)
		}
		if req.NodeID != "" && old.NodeID != req.NodeID {
			return nil, structs.NewError(structs.CodePermissionDenied,
				fmt.Sprintf("alloc %q is on node %q, not %q", u.ID, old.NodeID, req.NodeID))
		}
		if old.Terminal() || (old.ClientStatus == u.ClientStatus && old.ClientDescription == u.ClientDescription) {
			continue
		}
		a := old.Copy()
		a.ClientStatus, a.ClientDescription = u.ClientStatus, u.ClientDescription
		a.ModifyIndex = tx.index
		tx.put(TableAllocs, a)
		if a.Terminal() {
			resp.HolderDetached += releaseAllocClaimsDetached(tx, a, structs.EvalTriggerAllocTerminal, req.NodeID, u.DetachedVolumes)
		}
	}
	return &resp, nil
}
