package endpoints

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Volume registers, reads and removes volumes.
type Volume struct {
	srv  Server
	auth *authz
}

// maxVolumesPerRequest bounds one registration so that one entry stays
// small enough to replicate quickly.
const maxVolumesPerRequest = 1000

// Register creates or updates volumes. Validation happens here, before the
// log, so that a bad spec never becomes an entry; the FSM checks again.
func (v *Volume) Register(args *structs.VolumeRegisterRequest, reply *structs.GenericResponse) error {
	if done, err := v.srv.Forward("Volume.Register", args, args, reply); done {
		return err
	}
	if _, err := v.auth.check("Volume.Register", args); err != nil {
		return err
	}
	if len(args.Volumes) == 0 {
		return structs.Invalid("volumes", "at least one volume is required")
	}
	if len(args.Volumes) > maxVolumesPerRequest {
		return structs.Invalid("volumes", fmt.Sprintf("%d volumes, at most %d per request", len(args.Volumes), maxVolumesPerRequest))
	}
	seen := map[string]bool{}
	for i, vol := range args.Volumes {
		if err := vol.Validate(); err != nil {
			if len(args.Volumes) > 1 {
				return structs.Invalid(fmt.Sprintf("volumes[%d]", i), err.Error())
			}
			return err
		}
		if seen[vol.ID] {
			return structs.Invalid(fmt.Sprintf("volumes[%d].id", i), fmt.Sprintf("%q appears twice", vol.ID))
		}
		seen[vol.ID] = true
	}
	_, index, err := v.srv.Apply(structs.VolumeRegisterRequestType, args)
	reply.Index = index
	return err
}

// Deregister removes volumes.
func (v *Volume) Deregister(args *structs.VolumeDeregisterRequest, reply *structs.GenericResponse) error {
	if done, err := v.srv.Forward("Volume.Deregister", args, args, reply); done {
		return err
	}
	if _, err := v.auth.check("Volume.Deregister", args); err != nil {
		return err
	}
	if len(args.VolumeIDs) == 0 {
		return structs.Invalid("volume_ids", "at least one volume ID is required")
	}
	for i, id := range args.VolumeIDs {
		if err := structs.ValidateID(fmt.Sprintf("volume_ids[%d]", i), id); err != nil {
			return err
		}
	}
	_, index, err := v.srv.Apply(structs.VolumeDeregisterRequestType, args)
	reply.Index = index
	return err
}

// Get reads one volume; a missing volume is a not_found error.
func (v *Volume) Get(args *structs.VolumeSpecificRequest, reply *structs.VolumeResponse) error {
	if done, err := v.srv.Forward("Volume.Get", args, args, reply); done {
		return err
	}
	if _, err := v.auth.check("Volume.Get", args); err != nil {
		return err
	}
	if err := structs.ValidateID("id", args.ID); err != nil {
		return err
	}
	return blockingQuery(v.srv, &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			vol, err := state.VolumeByID(ws, args.ID)
			if err != nil {
				return 0, err
			}
			if vol == nil {
				reply.Volume = nil
				if args.MinQueryIndex > 0 {
					// A blocking read waits for the volume to appear.
					return state.TableIndex(fsm.TableVolumes), nil
				}
				return 0, structs.NotFound("volume", args.ID)
			}
			reply.Volume = vol.Sanitize()
			return vol.ModifyIndex, nil
		})
}

// List reads all volumes, or those of one plugin.
func (v *Volume) List(args *structs.VolumeListRequest, reply *structs.VolumeListResponse) error {
	if done, err := v.srv.Forward("Volume.List", args, args, reply); done {
		return err
	}
	if _, err := v.auth.check("Volume.List", args); err != nil {
		return err
	}
	return blockingQuery(v.srv, &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			vols, err := state.Volumes(ws, args.PluginID)
			if err != nil {
				return 0, err
			}
			reply.Volumes = make([]*structs.Volume, 0, len(vols))
			for _, vol := range vols {
				reply.Volumes = append(reply.Volumes, vol.Sanitize())
			}
			return state.TableIndex(fsm.TableVolumes), nil
		})
}
