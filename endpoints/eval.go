package endpoints

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Eval reads volume-claim-gc evals.
type Eval struct {
	srv  *Deps
	auth *authz
}

// Get reads one eval.
func (e *Eval) Get(args *structs.EvalSpecificRequest, reply *structs.EvalResponse) error {
	c, done, err := e.auth.gate("Eval.Get", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("id", args.ID); err != nil {
		return err
	}
	return blockingQuery(e.srv, c, "Eval.Get", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			ev, err := state.EvalByID(ws, args.ID)
			if err != nil {
				return 0, err
			}
			reply.Eval = ev
			if ev == nil {
				if args.MinQueryIndex > 0 {
					return state.TableIndex(fsm.TableEvals), nil
				}
				return 0, structs.NotFound("eval", args.ID)
			}
			return ev.ModifyIndex, nil
		})
}

// List reads evals, optionally filtered by status and volume.
func (e *Eval) List(args *structs.EvalListRequest, reply *structs.EvalListResponse) error {
	c, done, err := e.auth.gate("Eval.List", args, reply, nil)
	if done {
		return err
	}
	if args.Status != "" && !args.Status.Valid() {
		return structs.Invalid("status", fmt.Sprintf("%q is not pending, complete or failed", args.Status))
	}
	return blockingQuery(e.srv, c, "Eval.List", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			var evals []*structs.Eval
			var err error
			switch {
			case args.VolumeID != "":
				evals, err = state.EvalsByVolume(ws, args.VolumeID)
			case args.Status != "":
				evals, err = state.EvalsByStatus(ws, args.Status)
			default:
				evals, err = state.Evals(ws)
			}
			if err != nil {
				return 0, err
			}
			reply.Evals = reply.Evals[:0]
			for _, ev := range evals {
				if args.Status != "" && ev.Status != args.Status {
					continue
				}
				reply.Evals = append(reply.Evals, ev)
			}
			return state.TableIndex(fsm.TableEvals), nil
		})
}
