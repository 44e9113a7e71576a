package fsm

import (
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// VolumeByID returns a volume, or nil, nil when there is none. ws, when not
// nil, gets a channel that fires when the volume changes.
func (s *StateStore) VolumeByID(ws memdb.WatchSet, id string) (*structs.Volume, error) {
	return firstAs[structs.Volume](s.first(ws, TableVolumes, indexID, id))
}

// Volumes returns the volumes of a plugin, or all of them when pluginID is
// empty, sorted by ID. A plugin's volumes come from a scan of all volumes
// (see the schema: the volumes table has no plugin index, to keep claim
// writes cheap); ws then fires on a change to any volume.
func (s *StateStore) Volumes(ws memdb.WatchSet, pluginID string) ([]*structs.Volume, error) {
	all, err := listAs[structs.Volume](s.list(ws, TableVolumes, indexID))
	if err != nil || pluginID == "" {
		return all, err
	}
	return slices.DeleteFunc(all, func(v *structs.Volume) bool { return v.PluginID != pluginID }), nil
}

// VolumesByClaimNode returns the volumes on which a node holds a claim,
// live or past, sorted by ID.
func (s *StateStore) VolumesByClaimNode(ws memdb.WatchSet, nodeID string) ([]*structs.Volume, error) {
	return listAs[structs.Volume](s.list(ws, TableVolumes, indexClaimNode, nodeID))
}

// ClaimsByNode returns a node's claims, live and past, sorted by volume ID
// then alloc ID (live before past within a volume). The watcher uses it to
// see whether another live claim on the node still uses a volume (S4).
func (s *StateStore) ClaimsByNode(ws memdb.WatchSet, nodeID string) ([]*structs.Claim, error) {
	vols, err := s.VolumesByClaimNode(ws, nodeID)
	if err != nil {
		return nil, err
	}
	var out []*structs.Claim
	for _, v := range vols {
		for _, c := range v.AllClaims() {
			if c.NodeID == nodeID {
				out = append(out, c)
			}
		}
	}
	return out, nil
}
