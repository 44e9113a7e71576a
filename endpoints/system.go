package endpoints

import (
	"context"
	"time"

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
	return err
}

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
