package endpoints

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Alloc places, stops and reads allocations.
type Alloc struct {
	srv  *Deps
	auth *authz
}

// maxAllocsPerRequest bounds one place request's entry.
const maxAllocsPerRequest = 1000

// Place creates allocations (desired run, client pending). The node's
// client agent sees them through its blocking query and claims volumes.
func (a *Alloc) Place(args *structs.AllocPlaceRequest, reply *structs.GenericResponse) error {
	_, done, err := a.auth.gate("Alloc.Place", args, reply, nil)
	if done {
		return err
	}
	if len(args.Allocs) == 0 {
		return structs.Invalid("allocs", "at least one allocation is required")
	}
	if len(args.Allocs) > maxAllocsPerRequest {
		return structs.Invalid("allocs", fmt.Sprintf("%d allocations, at most %d per request", len(args.Allocs), maxAllocsPerRequest))
	}
	for i, alloc := range args.Allocs {
		if err := alloc.Validate(); err != nil {
			if len(args.Allocs) > 1 {
				return structs.Invalid(fmt.Sprintf("allocs[%d]", i), err.Error())
			}
			return err
		}
	}
	_, index, err := a.srv.Apply(structs.AllocPlaceRequestType, args)
	reply.Index = index
	return err
}

// Stop sets desired status stop; the client reports the allocation
// terminal and the servers release its claims.
func (a *Alloc) Stop(args *structs.AllocStopRequest, reply *structs.GenericResponse) error {
	_, done, err := a.auth.gate("Alloc.Stop", args, reply, nil)
	if done {
		return err
	}
	if len(args.AllocIDs) == 0 {
		return structs.Invalid("alloc_ids", "at least one allocation ID is required")
	}
	for i, id := range args.AllocIDs {
		if err := structs.ValidateID(fmt.Sprintf("alloc_ids[%d]", i), id); err != nil {
			return err
		}
	}
	_, index, err := a.srv.Apply(structs.AllocStopRequestType, args)
	reply.Index = index
	return err
}

// Get reads one allocation.
func (a *Alloc) Get(args *structs.AllocSpecificRequest, reply *structs.AllocResponse) error {
	c, done, err := a.auth.gate("Alloc.Get", args, reply, a.auth.forNode("Alloc.Get", func() (string, bool) {
		// A node may read its own node's allocations: which node that is,
		// this server knows once it has the allocation. No allocation has
		// an invalid ID, so no node's secret can read it.
		if structs.ValidateID("id", args.ID) != nil {
			return "", true
		}
		if al, err := a.srv.State().AllocByID(nil, args.ID); err == nil && al != nil {
			return al.NodeID, true
		}
		return "", false
	}))
	if done {
		return err
	}
	if err := structs.ValidateID("id", args.ID); err != nil {
		if !c.granted() {
			// No node's allocation has this ID: a node secret is refused
			// before validation, like every caller that may not call.
			return a.auth.deny("Alloc.Get", "the token does not grant alloc:read")
		}
		return err
	}
	return blockingQuery(a.srv, c, "Alloc.Get", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			alloc, err := state.AllocByID(ws, args.ID)
			if err != nil {
				return 0, err
			}
			if alloc != nil {
				// A client agent reads only its own node's allocations.
				if err := c.allowNode(a.auth, "Alloc.Get", alloc.NodeID); err != nil {
					return 0, err
				}
			} else if !c.granted() {
				return 0, a.auth.deny("Alloc.Get", "the token does not grant alloc:read")
			}
			reply.Alloc = alloc
			if alloc == nil {
				if args.MinQueryIndex > 0 {
					return state.TableIndex(fsm.TableAllocs), nil
				}
				return 0, structs.NotFound("alloc", args.ID)
			}
			return alloc.ModifyIndex, nil
		})
}

// List reads allocations, all or one node's. Client agents watch their
// node's allocations with this as a blocking query.
func (a *Alloc) List(args *structs.AllocListRequest, reply *structs.AllocListResponse) error {
	c, done, err := a.auth.gate("Alloc.List", args, reply, a.auth.forNode("Alloc.List", func() (string, bool) { return args.NodeID, true }))
	if done {
		return err
	}
	if args.NodeID != "" {
		if err := structs.ValidateID("node_id", args.NodeID); err != nil {
			return err
		}
	}
	return blockingQuery(a.srv, c, "Alloc.List", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			var allocs []*structs.Alloc
			var err error
			if args.NodeID != "" {
				allocs, err = state.AllocsByNode(ws, args.NodeID)
			} else {
				allocs, err = state.Allocs(ws)
			}
			if err != nil {
				return 0, err
			}
			reply.Allocs = allocs
			if args.NodeID == "" {
				return state.TableIndex(fsm.TableAllocs), nil
			}
			// The node's allocations' newest change, so that a client is
			// not woken by writes to other nodes' allocations.
			var idx uint64
			for _, al := range allocs {
				idx = max(idx, al.ModifyIndex)
			}
			if idx == 0 {
				idx = state.TableIndex(fsm.TableAllocs)
			}
			return idx, nil
		})
}
