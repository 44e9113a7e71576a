package endpoints

import (
	"fmt"
	"strings"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Volume registers, reads and removes volumes.
type Volume struct {
	srv  *Deps
	auth *authz
}

// maxVolumesPerRequest bounds one registration so that one entry stays
// small enough to replicate quickly.
const maxVolumesPerRequest = 1000

// Register creates or updates volumes. Validation happens here, before the
// log, so that a bad spec never becomes an entry; the FSM checks again.
//
// A volume already registered with the same plugin and external ID whose
// spec asks for more capacity than recorded is grown after the entry, as
// `volume expand` does (Volume.grow): growing storage is what re-running
// register with a larger size means (issue 18). Every growth is checked
// before anything is written, so a batch with one bad volume (a smaller
// size than recorded, a plugin that cannot expand, a token without what
// expand needs) changes nothing. First registrations never call a plugin.
func (v *Volume) Register(args *structs.VolumeRegisterRequest, reply *structs.VolumeRegisterResponse) error {
	_, done, err := v.auth.gate("Volume.Register", args, reply, nil)
	if done {
		return err
	}
	if len(args.Volumes) == 0 {
		return structs.Invalid("volumes", "at least one volume is required")
	}
	if len(args.Volumes) > maxVolumesPerRequest {
		return structs.Invalid("volumes", fmt.Sprintf("%d volumes, at most %d per request", len(args.Volumes), maxVolumesPerRequest))
	}
	field := func(i int, name string) string {
		if len(args.Volumes) > 1 {
			return fmt.Sprintf("volumes[%d].%s", i, name)
		}
		return name
	}
	seen := map[string]bool{}
	var grows []growth
	var ids []string
	for i, vol := range args.Volumes {
		if err := vol.ValidateEntry(); err != nil {
			if len(args.Volumes) > 1 {
				return structs.Invalid(fmt.Sprintf("volumes[%d]", i), err.Error())
			}
			return err
		}
		if seen[vol.ID] {
			return structs.Invalid(fmt.Sprintf("volumes[%d].id", i), fmt.Sprintf("%q appears twice", vol.ID))
		}
		seen[vol.ID] = true
		g, err := v.registerGrowth(vol, field(i, "capacity"))
		if err != nil {
			return err
		}
		if g != nil {
			grows, ids = append(grows, *g), append(ids, vol.ID)
		}
	}
	if len(grows) > 0 {
		if _, err := v.auth.check("Volume.Expand", args); err != nil {
			return structs.Wrap(err, fmt.Sprintf("registering asks to grow %s, which needs what `volume expand` needs", strings.Join(ids, ", ")))
		}
	}
	_, index, err := v.srv.Apply(structs.VolumeRegisterRequestType, args)
	reply.Index, reply.RegisterIndex = index, index
	if err != nil {
		return err
	}
	// The expansions use the volumes as just registered (their secrets and
	// mount options may have changed). Each is idempotent: after a failure,
	// registering again grows what is still smaller than the spec.
	for i, g := range grows {
		vol, err := v.srv.State().VolumeByID(nil, ids[i])
		if err == nil && vol == nil {
			err = structs.NotFound("volume", ids[i])
		}
		if err == nil && vol.Capacity > g.capacity {
			// Another expansion got there first: nothing left to grow.
			continue
		}
		var grown structs.VolumeExpansion
		if err == nil {
			index, err = v.grow(vol, g, &grown)
		}
		if err != nil {
			return structs.Wrap(err, fmt.Sprintf("registered at index %d and grew %d of %d volumes; growing %q failed (register again to retry)",
				reply.RegisterIndex, i, len(grows), ids[i]))
		}
		reply.Expanded = append(reply.Expanded, &grown)
		reply.Index = index
	}
	return nil
}

// registerGrowth says whether registering spec grows a registered volume:
// the same storage object (plugin and external ID) with a known size that
// the spec's capacity exceeds. It refuses, naming field, a smaller size
// than recorded and a growth the plugin cannot do. A volume registered the
// first time, another storage object, an unknown recorded size or a spec
// without capacity (0 keeps the recorded size) is a change of record only.
func (v *Volume) registerGrowth(spec *structs.Volume, field string) (*growth, error) {
	old, err := v.srv.State().VolumeByID(nil, spec.ID)
	if err != nil || old == nil || old.PluginID != spec.PluginID || old.ExternalID != spec.ExternalID ||
		old.Capacity == 0 || spec.Capacity == 0 || spec.Capacity == old.Capacity {
		return nil, err
	}
	g := growth{capacity: spec.Capacity, field: field, capField: field}
	if _, err := v.checkGrowth(old, g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Deregister removes volumes.
func (v *Volume) Deregister(args *structs.VolumeDeregisterRequest, reply *structs.GenericResponse) error {
	_, done, err := v.auth.gate("Volume.Deregister", args, reply, nil)
	if done {
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
	c, done, err := v.auth.gate("Volume.Get", args, reply, v.auth.forNode("Volume.Get", func() (string, bool) {
		// A node may read a volume one of its own allocations asks for
		// (the agent checks whether the servers still hold its claim:
		// an operator's force detach, a fence release), never another.
		return v.nodeAsking(args.NodeID, args.ID)
	}))
	if done {
		return err
	}
	if err := structs.ValidateID("id", args.ID); err != nil {
		return err
	}
	return blockingQuery(v.srv, c, "Volume.Get", &args.QueryOptions, &reply.QueryMeta,
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
	c, done, err := v.auth.gate("Volume.List", args, reply, nil)
	if done {
		return err
	}
	return blockingQuery(v.srv, c, "Volume.List", &args.QueryOptions, &reply.QueryMeta,
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

// registered returns a registered volume from this server's state, or
// not_found naming it.
func (v *Volume) registered(id string) (*structs.Volume, error) {
	vol, err := v.srv.State().VolumeByID(nil, id)
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, structs.NotFound("volume", id)
	}
	return vol, nil
}

// nodeAsking is the node a node-secret read of volume volID is checked
// against: nodeID when one of its allocations asks for the volume or one
// of its claims is on it, else "" (no node may read it). known is false
// when this server does not know the node yet (the leader decides).
func (v *Volume) nodeAsking(nodeID, volID string) (string, bool) {
	if nodeID == "" || structs.ValidateID("node_id", nodeID) != nil || structs.ValidateID("id", volID) != nil {
		return "", true
	}
	state := v.srv.State()
	if n, err := state.NodeByID(nil, nodeID); err != nil || n == nil {
		return nodeID, false
	}
	allocs, err := state.AllocsByNode(nil, nodeID)
	if err != nil {
		return "", true
	}
	for _, a := range allocs {
		for _, vr := range a.Volumes {
			if vr.VolumeID == volID {
				return nodeID, true
			}
		}
	}
	if vol, err := state.VolumeByID(nil, volID); err == nil && vol != nil {
		for _, c := range vol.AllClaims() {
			if c.NodeID == nodeID {
				return nodeID, true
			}
		}
	}
	return "", true
}
