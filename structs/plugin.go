package structs

// Plugin is a CSI plugin as the cluster sees it. Nobody registers plugins:
// the state machine derives them from node fingerprints whenever a node
// registers, changes status or leaves, so a plugin can never disagree with
// the nodes that run it. A plugin with no instances left is deleted.
type Plugin struct {
	ID              string `json:"id"`
	Provider        string `json:"provider,omitempty"`
	ProviderVersion string `json:"provider_version,omitempty"`
	// ControllerRequired is true when any instance reports that the plugin
	// needs ControllerPublish/Unpublish; claims then need a healthy
	// controller.
	ControllerRequired bool `json:"controller_required"`
	// ControllerCapabilities and NodeCapabilities are what the plugin
	// advertises, taken from the instance with the lowest node ID that
	// reports them (every instance of one plugin version answers the same;
	// the lowest ID makes every server pick the same). Per-node facts, max
	// volumes and topology, stay on the instances. The controller
	// capabilities, and the provider when any admitted controller reports
	// one, come from admitted controllers only: a node that merely says
	// it runs a controller cannot redefine the plugin for everyone.
	ControllerCapabilities *CSIControllerCapabilities `json:"controller_capabilities,omitempty"`
	NodeCapabilities       *CSINodeCapabilities       `json:"node_capabilities,omitempty"`
	// Instances keyed by node ID. Healthy here means the fingerprint is
	// healthy and the node is ready: a plugin on a down node cannot serve.
	Controllers map[string]*CSIInfo `json:"controllers,omitempty"`
	Nodes       map[string]*CSIInfo `json:"nodes,omitempty"`
	// ControllersHealthy counts admitted controllers that are healthy:
	// only those are sent calls. ControllersPending counts controllers
	// not admitted (see Admissions), healthy or not. (The state machine's
	// own claim check counts every healthy controller, admitted or not,
	// so that servers of every version decide claims alike; the call
	// itself goes to admitted controllers only.)
	ControllersHealthy int `json:"controllers_healthy"`
	NodesHealthy       int `json:"nodes_healthy"`
	ControllersPending int `json:"controllers_pending"`
	// Admissions are the plugin's admitted controllers by node ID
	// (ControllerAdmitted); a controller without one is pending.
	Admissions map[string]*ControllerAdmission `json:"admissions,omitempty"`

	CreateIndex uint64 `json:"create_index,omitempty"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// Copy returns a deep copy; state-store objects are never mutated in place.
func (p *Plugin) Copy() *Plugin {
	if p == nil {
		return nil
	}
	c := *p
	c.ControllerCapabilities = p.ControllerCapabilities.Copy()
	c.NodeCapabilities = p.NodeCapabilities.Copy()
	c.Controllers = copyFingerprints(p.Controllers)
	c.Nodes = copyFingerprints(p.Nodes)
	c.Admissions = copyAdmissions(p.Admissions)
	return &c
}

// Schedulable reports whether a claim on nodeID can be served: a healthy
// node plugin there and, when required, a healthy controller anywhere.
// The reason is empty when it can.
func (p *Plugin) Schedulable(nodeID string) (ok bool, reason string) {
	if p == nil {
		return false, "plugin has no instances"
	}
	if n := p.Nodes[nodeID]; n == nil || !n.Healthy {
		return false, "no healthy node plugin " + quote(p.ID) + " on node " + quote(nodeID)
	}
	if p.ControllerRequired && p.ControllersHealthy == 0 {
		return false, "plugin " + quote(p.ID) + " requires a controller and none is healthy"
	}
	return true, ""
}

// PluginSpecificRequest reads one plugin.
type PluginSpecificRequest struct {
	ID string
	QueryOptions
}

// PluginResponse carries one plugin (nil when not found).
type PluginResponse struct {
	Plugin *Plugin
	QueryMeta
}

// PluginListResponse carries plugins sorted by ID.
type PluginListResponse struct {
	Plugins []*Plugin
	QueryMeta
}
