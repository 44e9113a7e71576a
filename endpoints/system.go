package endpoints

import (
	"context"
	"strings"
	"time"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// System runs cluster-wide maintenance.
type System struct {
	srv  *Deps
	auth *authz
}

// GarbageCollect runs the claim GC on the leader now. It creates evals for
// past claims that have none and retries every release at once; it does not
// wait for any release, so a stuck one never blocks it (seed 2).
func (s *System) GarbageCollect(args *structs.SystemGCRequest, reply *structs.SystemGCResponse) error {
	_, done, err := s.auth.gate("System.GarbageCollect", args, reply, nil)
	if done {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := s.srv.Releases.RunClaimGC(ctx)
	reply.EvalsCreated = n
	if err != nil {
		return err
	}
	reply.AllocsRemoved, err = s.collectAllocs(args.AllocPrefix)
	return err
}

// collectAllocs removes terminal allocations that hold no claim (whose ID
// starts with prefix), in entries of fsm's bound. The state machine checks
// each again when it applies the entry: one that took a claim meanwhile
// (it cannot: terminal allocations claim nothing) would stay.
func (s *System) collectAllocs(prefix string) (int, error) {
	state := s.srv.State()
	allocs, err := state.Allocs(nil)
	if err != nil {
		return 0, err
	}
	volume := func(id string) *structs.Volume {
		v, _ := state.VolumeByID(nil, id)
		return v
	}
	var ids []string
	for _, a := range allocs {
		if strings.HasPrefix(a.ID, prefix) && fsm.AllocCollectable(a, volume) {
			ids = append(ids, a.ID)
		}
	}
	removed := 0
	for start := 0; start < len(ids); start += allocGCBatch {
		resp, _, err := s.srv.Apply(structs.AllocGCRequestType, &structs.AllocGCRequest{AllocIDs: ids[start:min(start+allocGCBatch, len(ids))]})
		if err != nil {
			return removed, err
		}
		if r, ok := resp.(*structs.AllocGCResponse); ok {
			removed += len(r.Removed)
		}
	}
	return removed, nil
}

// allocGCBatch is how many allocations one entry removes (fsm's bound).
const allocGCBatch = 1024

// ReleaseStatus returns the leader's retry state of releases: attempts,
// last error and next try, per volume.
func (s *System) ReleaseStatus(args *structs.ReleaseStatusRequest, reply *structs.ReleaseStatusResponse) error {
	_, done, err := s.auth.gate("System.ReleaseStatus", args, reply, nil)
	if done {
		return err
	}
	reply.Volumes = s.srv.Releases.Status()
	return nil
}
