package csi

import (
	"context"
	"fmt"
	"maps"
	"reflect"
)

// PluginFingerprint is what a node knows about one of its plugins. The agent
// sends these to the servers, which derive the plugin table from them.
type PluginFingerprint struct {
	ID       string
	Type     PluginType
	Endpoint string

	// From GetPluginInfo.
	Name    string
	Version string

	// Healthy is false when the plugin could not be reached, said it was not
	// ready, or does not serve what its Type promises; HealthDescription
	// says which.
	Healthy           bool
	HealthDescription string

	// RequiresControllerPublish: volumes must be ControllerPublished before a
	// node stages them. Where the controller runs here (controller and
	// monolith types) this is its PUBLISH_UNPUBLISH_VOLUME capability; a
	// node-type plugin cannot be asked that, so for it this is whether the
	// plugin advertises a controller service at all.
	RequiresControllerPublish bool
	// SupportsReadOnlyAttach: ControllerPublish honours readonly.
	SupportsReadOnlyAttach bool
	// RequiresStaging: the node plugin needs NodeStageVolume first (node
	// capability STAGE_UNSTAGE_VOLUME).
	RequiresStaging bool

	// From NodeGetInfo (node and monolith plugins).
	NodeExternalID     string
	MaxVolumes         int64
	AccessibleTopology map[string]string

	// ControllerCaps (controller and monolith plugins) and NodeCaps (node
	// and monolith plugins) are everything the plugin advertises, for the
	// operator's `plugin status`; the booleans above are what claimd's own
	// paths decide on.
	ControllerCaps ControllerCapabilities
	NodeCaps       NodeCapabilities
}

// Equal compares every field; the manager reports a change when it is false.
func (f PluginFingerprint) Equal(o PluginFingerprint) bool {
	a, b := f, o
	a.AccessibleTopology, b.AccessibleTopology = nil, nil
	// maps.Equal treats nil and empty alike, which DeepEqual would not.
	return reflect.DeepEqual(a, b) && maps.Equal(f.AccessibleTopology, o.AccessibleTopology)
}

// fingerprint asks one plugin everything the fingerprint holds. It starts
// from prev so that a plugin that becomes unreachable keeps what was last
// learnt about it (its node ID, say) while being reported unhealthy.
func fingerprint(ctx context.Context, c *Client, pc PluginConfig, prev PluginFingerprint) PluginFingerprint {
	fp := prev
	fp.ID, fp.Type, fp.Endpoint = pc.ID, pc.Type, pc.Socket
	fail := func(err error) PluginFingerprint {
		fp.Healthy = false
		fp.HealthDescription = err.Error()
		return fp
	}

	info, err := c.GetPluginInfo(ctx)
	if err != nil {
		return fail(err)
	}
	fp.Name, fp.Version = info.Name, info.VendorVersion

	pcaps, err := c.GetPluginCapabilities(ctx)
	if err != nil {
		return fail(err)
	}
	fp.RequiresControllerPublish = pcaps.ControllerService
	if pc.Type.HasController() {
		if !pcaps.ControllerService {
			return fail(fmt.Errorf("plugin %s does not serve the controller service its type %q needs", pc.ID, pc.Type))
		}
		ccaps, err := c.ControllerGetCapabilities(ctx)
		if err != nil {
			return fail(err)
		}
		fp.RequiresControllerPublish = ccaps.PublishUnpublishVolume
		fp.SupportsReadOnlyAttach = ccaps.PublishReadOnly
		fp.ControllerCaps = *ccaps
	}
	if pc.Type.HasNode() {
		ni, err := c.NodeGetInfo(ctx)
		if err != nil {
			return fail(err)
		}
		if ni.NodeID == "" {
			return fail(fmt.Errorf("plugin %s reported an empty node ID", pc.ID))
		}
		fp.NodeExternalID, fp.MaxVolumes, fp.AccessibleTopology = ni.NodeID, ni.MaxVolumes, ni.AccessibleTopology
		ncaps, err := c.NodeGetCapabilities(ctx)
		if err != nil {
			return fail(err)
		}
		fp.RequiresStaging = ncaps.StageUnstageVolume
		fp.NodeCaps = *ncaps
	}
	return probe(ctx, c, fp)
}

// probe updates only the health of a fingerprint: the cheap check made every
// interval once a plugin is known.
func probe(ctx context.Context, c *Client, fp PluginFingerprint) PluginFingerprint {
	ready, err := c.Probe(ctx)
	switch {
	case err != nil:
		fp.Healthy, fp.HealthDescription = false, err.Error()
	case !ready:
		fp.Healthy, fp.HealthDescription = false, "plugin probe: not ready"
	default:
		fp.Healthy, fp.HealthDescription = true, "healthy"
	}
	return fp
}
