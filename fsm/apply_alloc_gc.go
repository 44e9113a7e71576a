package fsm

import (
	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.AllocGCRequestType, applyAllocGC)
}

// maxAllocGC bounds one entry: a garbage collection of many allocations
// is several entries, each a small Raft round.
const maxAllocGC = 1024

// applyAllocGC removes the named allocations that are terminal (their
// client said complete, failed or lost) and hold no claim on any volume,
// live or past: nothing can still be mounted or released for them, and
// no node will report them again. Anything else named is left, not
// refused, so that a list read a moment earlier is safe to apply.
func applyAllocGC(tx *txn, req *structs.AllocGCRequest) (any, error) {
	if len(req.AllocIDs) == 0 {
		return nil, structs.Invalid("alloc_ids", "must not be empty")
	}
	if len(req.AllocIDs) > maxAllocGC {
		return nil, structs.Invalid("alloc_ids", "more than 1024 in one request")
	}
	resp := &structs.AllocGCResponse{}
	for _, id := range sortedUnique(req.AllocIDs) {
		a := getAlloc(tx, id)
		if a == nil || !AllocCollectable(a, func(id string) *structs.Volume { return getVolume(tx, id) }) {
			continue
		}
		tx.remove(TableAllocs, a)
		resp.Removed = append(resp.Removed, id)
	}
	return resp, nil
}

// AllocCollectable reports whether an allocation may be removed: terminal,
// and no volume it asked for holds a claim of it.
func AllocCollectable(a *structs.Alloc, volume func(id string) *structs.Volume) bool {
	if !a.Terminal() {
		return false
	}
	for _, vr := range a.Volumes {
		v := volume(vr.VolumeID)
		if v == nil {
			continue
		}
		if v.ReadClaims[a.ID] != nil || v.WriteClaims[a.ID] != nil || v.PastClaims[a.ID] != nil {
			return false
		}
	}
	return true
}
