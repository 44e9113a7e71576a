package hostdir

import (
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostdir's topology model: one root is one storage system, and every
// process sharing it is told its segments with -topology. A controller's
// segments say where the volumes it creates can be reached, a node's where
// the node is. A plugin without segments has no topology at all: it does
// not advertise VOLUME_ACCESSIBILITY_CONSTRAINTS and ignores requirements,
// as the CSI spec lets a CO send them only to plugins that do.

// topologyMatches reports whether the requested segments t are satisfied
// by have: every key t names has the same value there. A request naming
// fewer keys than the plugin has (a region without a zone, say) matches.
func topologyMatches(t map[string]string, have map[string]string) bool {
	for k, v := range t {
		if have[k] != v {
			return false
		}
	}
	return true
}

// volumeTopology decides a new volume's accessible topology from the
// request. A requisite list this plugin's segments satisfy none of cannot
// be served: ResourceExhausted, as the spec asks when the plugin "is
// unable to provision in the accessible_topology". Preferred topologies
// are advice the spec lets the plugin not follow, so they never fail the
// call; with one place to offer, there is nothing to choose between.
func (p *Plugin) volumeTopology(req *csipb.TopologyRequirement) ([]map[string]string, error) {
	have := p.cfg.Topology
	if len(have) == 0 {
		return nil, nil
	}
	if requisite := req.GetRequisite(); len(requisite) > 0 {
		ok := false
		for _, t := range requisite {
			if topologyMatches(t.GetSegments(), have) {
				ok = true
				break
			}
		}
		if !ok {
			return nil, status.Errorf(codes.ResourceExhausted,
				"accessibility requirements: no requisite topology is satisfied by this plugin's segments %v", have)
		}
	}
	return []map[string]string{maps.Clone(have)}, nil
}

// topologyOK reports whether the recorded topology of an existing volume
// satisfies a repeated CreateVolume's requisite list.
func topologyOK(recorded []map[string]string, req *csipb.TopologyRequirement) bool {
	requisite := req.GetRequisite()
	if len(requisite) == 0 || len(recorded) == 0 {
		return true
	}
	for _, have := range recorded {
		for _, t := range requisite {
			if topologyMatches(t.GetSegments(), have) {
				return true
			}
		}
	}
	return false
}

// reachableFrom reports whether a node with segments node can reach a
// volume with accessible topology recorded: with no recorded topology,
// every node can.
func reachableFrom(recorded []map[string]string, node map[string]string) bool {
	if len(recorded) == 0 {
		return true
	}
	for _, t := range recorded {
		if topologyMatches(t, node) {
			return true
		}
	}
	return false
}

func toCSITopology(ts []map[string]string) []*csipb.Topology {
	var out []*csipb.Topology
	for _, t := range ts {
		out = append(out, &csipb.Topology{Segments: maps.Clone(t)})
	}
	return out
}
