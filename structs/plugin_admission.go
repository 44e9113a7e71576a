package structs

import "sort"

// Controller admission (issue 38): a node's controller plugin is sent
// controller calls, which carry volume secrets and whose success the
// servers record, only once it is admitted. A fingerprint is the node's
// own word; an admission is the cluster's, kept in Raft.

// How a controller came to be admitted.
const (
	// AdmittedByOperator: Plugin.AdmitController with a token that grants
	// plugin:write.
	AdmittedByOperator = "operator"
	// AdmittedByServerCert: the node registered over a connection with a
	// server certificate (an agent run with -server and -client, such as
	// -dev): whoever holds one is already trusted with the whole cluster.
	AdmittedByServerCert = "server-certificate"
	// AdmittedByACLDisabled: ACLs are off, so there is no authorization
	// model to admit by: every registered controller is admitted.
	AdmittedByACLDisabled = "acl-disabled"
)

// ControllerAdmission lets the controller of PluginID on NodeID receive
// controller calls. It lasts until revoked or the node is deregistered.
type ControllerAdmission struct {
	PluginID string `json:"plugin_id"`
	NodeID   string `json:"node_id"`
	// Source is one of the AdmittedBy constants.
	Source      string `json:"source"`
	CreateIndex uint64 `json:"create_index,omitempty"`
}

// Copy returns a copy.
func (a *ControllerAdmission) Copy() *ControllerAdmission {
	if a == nil {
		return nil
	}
	c := *a
	return &c
}

// PluginAdmissionRequest admits (Plugin.AdmitController) or revokes
// (Plugin.RevokeController) the controller of PluginID on NodeID.
type PluginAdmissionRequest struct {
	PluginID string
	NodeID   string
	WriteRequest
}

// Validate checks the IDs.
func (r *PluginAdmissionRequest) Validate() error {
	if err := ValidateID("plugin_id", r.PluginID); err != nil {
		return err
	}
	return ValidateID("node_id", r.NodeID)
}

// PluginAdmissionResponse is the index the change committed at.
type PluginAdmissionResponse struct {
	WriteMeta
}

// ControllerAdmitted reports whether the controller on nodeID is admitted.
func (p *Plugin) ControllerAdmitted(nodeID string) bool {
	return p != nil && p.Admissions[nodeID] != nil
}

// PendingControllers lists, sorted, the nodes whose controller of p is
// not admitted: they receive no call until an operator admits them.
func (p *Plugin) PendingControllers() []string {
	if p == nil {
		return nil
	}
	var out []string
	for id := range p.Controllers {
		if p.Admissions[id] == nil {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func copyAdmissions(m map[string]*ControllerAdmission) map[string]*ControllerAdmission {
	if m == nil {
		return nil
	}
	out := make(map[string]*ControllerAdmission, len(m))
	for k, v := range m {
		out[k] = v.Copy()
	}
	return out
}

// ControllerCallLimit is how many ControllerUnpublish calls of the plugin
// a server runs at once: the smallest controller_calls of its admitted
// controllers, at least one (decision 57). A setting is only as good as
// the back end every controller drives, so the most careful one wins; a
// controller not admitted has no say.
func (p *Plugin) ControllerCallLimit() int {
	if p == nil {
		return 1
	}
	limit := 0
	for id, c := range p.Controllers {
		if c == nil || !p.ControllerAdmitted(id) {
			continue
		}
		n := max(c.ControllerCalls, 1)
		if limit == 0 || n < limit {
			limit = n
		}
	}
	return max(limit, 1)
}
