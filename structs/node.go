package structs

import (
	"fmt"
	"sort"
	"time"
)

// NodeStatus is whether the servers consider a client node alive.
type NodeStatus string

const (
	NodeStatusReady NodeStatus = "ready"
	NodeStatusDown  NodeStatus = "down"
)

func (s NodeStatus) Valid() bool { return s == NodeStatusReady || s == NodeStatusDown }

// CSIInfo is a node's fingerprint of one CSI plugin it runs, as its node or
// its controller service.
type CSIInfo struct {
	PluginID          string `json:"plugin_id"`
	Healthy           bool   `json:"healthy"`
	HealthDescription string `json:"health_description,omitempty"`
	Provider          string `json:"provider,omitempty"`
	ProviderVersion   string `json:"provider_version,omitempty"`
	// RequiresControllerPlugin is true when the plugin advertises the
	// controller service with publish/unpublish: claims then need a healthy
	// controller somewhere in the cluster. Node fingerprints must report it
	// too (GetPluginCapabilities answers the same on every instance): the
	// requirement is derived from the instances, and if only controllers
	// said so, losing every controller would make claims look schedulable
	// without a ControllerPublish.
	RequiresControllerPlugin bool `json:"requires_controller_plugin,omitempty"`
	// ExternalNodeID is the node plugin's NodeGetInfo node ID (node
	// fingerprints only); it becomes Claim.ExternalNodeID.
	ExternalNodeID string `json:"external_node_id,omitempty"`
	// MaxVolumes is the node plugin's limit on volumes per node, 0 = none
	// (NodeGetInfo's max_volumes_per_node). The state machine enforces it
	// at claim time.
	MaxVolumes int64 `json:"max_volumes,omitempty"`
	// AccessibleTopology is the node plugin's NodeGetInfo topology segments
	// on this node (node fingerprints only): a volume with an accessible
	// topology may be claimed here only when one of its segments matches.
	AccessibleTopology map[string]string `json:"accessible_topology,omitempty"`
	// ControllerCapabilities (controller fingerprints) and NodeCapabilities
	// (node fingerprints) are what the plugin advertises; nil when the
	// plugin was never fingerprinted healthy or the agent predates them.
	ControllerCapabilities *CSIControllerCapabilities `json:"controller_capabilities,omitempty"`
	NodeCapabilities       *CSINodeCapabilities       `json:"node_capabilities,omitempty"`
	// ControllerCalls (controller fingerprints) is how many
	// ControllerUnpublish calls the plugin takes at once as its operator
	// configured it (controller_calls); 0 means one. The servers send at
	// most the smallest setting of the plugin's admitted controllers
	// (Plugin.ControllerCallLimit, decision 57).
	ControllerCalls int `json:"controller_calls,omitempty"`
}

// Copy returns a deep copy.
func (i *CSIInfo) Copy() *CSIInfo {
	if i == nil {
		return nil
	}
	c := *i
	c.AccessibleTopology = copySegments(i.AccessibleTopology)
	c.ControllerCapabilities = i.ControllerCapabilities.Copy()
	c.NodeCapabilities = i.NodeCapabilities.Copy()
	return &c
}

// Node is a client agent's machine.
type Node struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// SecretID authenticates the node's own calls; Sanitize blanks it.
	SecretID string     `json:"secret_id,omitempty"`
	Status   NodeStatus `json:"status"`
	// Fingerprints keyed by plugin ID.
	CSINodePlugins       map[string]*CSIInfo `json:"csi_node_plugins,omitempty"`
	CSIControllerPlugins map[string]*CSIInfo `json:"csi_controller_plugins,omitempty"`
	// Lease is how long the agent keeps its fence-policy workloads running
	// without an acknowledged heartbeat (0: it holds no lease, and its
	// fence-policy claims wait like wait-policy ones). Set by the agent.
	Lease time.Duration `json:"lease,omitempty"`
	// Eligibility is whether new claims may be taken on the node (empty:
	// eligible). Set by operators (node eligibility, drain); a
	// re-registration keeps it.
	Eligibility NodeEligibility `json:"eligibility,omitempty"`
	// LastFence is what the agent last fenced, as it reported on
	// registering again; a registration without a report keeps it.
	LastFence *FenceReport `json:"last_fence,omitempty"`
	// RegisteredCert is the SHA-256 (hex) of the client certificate that
	// admitted the node, when the certificate alone did (no token that
	// grants node:write): what the per-certificate cap on new nodes counts
	// (endpoints/register_limits.go). Set by the leader, never by the
	// agent; kept across re-registrations. Not a secret.
	RegisteredCert string `json:"registered_cert,omitempty"`
	// Version is the build the client agent runs (claimd version), as it
	// said when it registered: what a rolling upgrade of the client agents
	// is watched by (`claimd node status`). Empty for agents older than it.
	Version string `json:"version,omitempty"`

	CreateIndex uint64 `json:"create_index,omitempty"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// Limits on a node's fingerprints, so one node cannot bloat the state.
const (
	maxNodePlugins   = 64
	maxSecretIDLen   = 256
	maxVersionLen    = 64
	maxFingerprintSz = 4096
)

// Validate checks a node as its agent registers it; errors name the field.
func (n *Node) Validate() error {
	if n == nil {
		return Invalid("node", "must be given")
	}
	if err := ValidateID("id", n.ID); err != nil {
		return err
	}
	if len(n.Name) > maxVolumeValueLen {
		return Invalid("name", fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
	}
	if n.SecretID == "" {
		return Invalid("secret_id", "must not be empty")
	}
	if len(n.Version) > maxVersionLen {
		return Invalid("version", fmt.Sprintf("longer than %d bytes", maxVersionLen))
	}
	if len(n.SecretID) > maxSecretIDLen {
		return Invalid("secret_id", fmt.Sprintf("longer than %d bytes", maxSecretIDLen))
	}
	if n.Status != "" && !n.Status.Valid() {
		return Invalid("status", fmt.Sprintf("%q is not %q or %q", n.Status, NodeStatusReady, NodeStatusDown))
	}
	if err := ValidateNodeLease("lease", n.Lease); err != nil {
		return err
	}
	if !n.Eligibility.Valid() {
		return Invalid("eligibility", fmt.Sprintf("%q is not %q or %q", n.Eligibility, NodeEligible, NodeIneligible))
	}
	if err := n.LastFence.Validate(); err != nil {
		return err
	}
	if err := validateFingerprints("csi_node_plugins", n.CSINodePlugins); err != nil {
		return err
	}
	return validateFingerprints("csi_controller_plugins", n.CSIControllerPlugins)
}

func validateFingerprints(field string, m map[string]*CSIInfo) error {
	if len(m) > maxNodePlugins {
		return Invalid(field, fmt.Sprintf("has %d entries, at most %d allowed", len(m), maxNodePlugins))
	}
	for _, id := range SortedKeys(m) {
		info := m[id]
		f := field + "." + id
		if err := ValidateID(field, id); err != nil {
			return err
		}
		if info == nil {
			return Invalid(f, "must not be null")
		}
		if info.PluginID != id {
			return Invalid(f+".plugin_id", fmt.Sprintf("%q does not match its key", info.PluginID))
		}
		if len(info.HealthDescription)+len(info.Provider)+len(info.ProviderVersion)+
			len(info.ExternalNodeID) > maxFingerprintSz {
			return Invalid(f, fmt.Sprintf("longer than %d bytes", maxFingerprintSz))
		}
		if err := validateSegments(f+".accessible_topology", info.AccessibleTopology, true); err != nil {
			return err
		}
		if info.MaxVolumes < 0 {
			return Invalid(f+".max_volumes", fmt.Sprintf("%d is negative", info.MaxVolumes))
		}
	}
	return nil
}

// Copy returns a deep copy; state-store objects are never mutated in place.
func (n *Node) Copy() *Node {
	if n == nil {
		return nil
	}
	c := *n
	c.CSINodePlugins = copyFingerprints(n.CSINodePlugins)
	c.CSIControllerPlugins = copyFingerprints(n.CSIControllerPlugins)
	c.LastFence = n.LastFence.Copy()
	return &c
}

// Sanitize returns a copy fit to show an operator: no secret ID.
func (n *Node) Sanitize() *Node {
	c := n.Copy()
	if c != nil && c.SecretID != "" {
		c.SecretID = redacted
	}
	return c
}

func copyFingerprints(m map[string]*CSIInfo) map[string]*CSIInfo {
	if m == nil {
		return nil
	}
	out := make(map[string]*CSIInfo, len(m))
	for k, v := range m {
		out[k] = v.Copy()
	}
	return out
}

// SortedKeys returns a map's keys in order: the state machine never lets
// map order reach its results.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NodeRegisterRequest registers a node or updates it (fingerprints, name,
// status). A node keeps its SecretID: a re-register with another one is
// refused.
type NodeRegisterRequest struct {
	Node *Node
	// ClientCertified is set by the server the agent is connected to when
	// the agent presented a client (or server) certificate, so that the leader can
	// admit a new node after forwarding. The leader trusts it only on a
	// request forwarded over a server certificate.
	ClientCertified bool
	// AutoAdmit, when not "", admits the node's controllers as they
	// register (a structs.AdmittedBy source). Set by the server that
	// serves the call from the entry identity and its ACL setting, never
	// taken from the caller (endpoints.autoAdmitSource).
	AutoAdmit string
	WriteRequest
}

// Eligible reports whether new claims may be taken on the node.
func (n *Node) Eligible() bool { return n.Eligibility != NodeIneligible }

// NodeUpdateStatusRequest marks a node ready or down. Down makes every
// allocation on it lost, and so their claims past, in the same entry.
type NodeUpdateStatusRequest struct {
	NodeID string
	Status NodeStatus
	WriteRequest
}

// MaxHeartbeatBatch bounds the heartbeats one Node.UpdateStatusBatch call
// carries: a batch is served item by item at the leader, and a bounded one
// is answered within milliseconds.
const MaxHeartbeatBatch = 256

// NodeHeartbeatBatchRequest carries heartbeats that a follower received
// from client agents to the leader in one call (decision 43). Each item is
// the agent's own request as it entered the follower, its token and
// CallOrigin included; the leader checks and serves each as a forwarded
// call of its own, so a batch allows nothing its items would not.
type NodeHeartbeatBatchRequest struct {
	Heartbeats []*NodeUpdateStatusRequest
	WriteRequest
}

// NodeHeartbeatBatchResponse answers each heartbeat of a batch, in order.
type NodeHeartbeatBatchResponse struct {
	Results []NodeHeartbeatResult
}

// NodeHeartbeatResult is one heartbeat's answer: what its own call would
// have returned, the error as its text ("" when served).
type NodeHeartbeatResult struct {
	Response NodeUpdateResponse
	Error    string
}

// NodeDeregisterRequest removes nodes; their allocations become lost.
type NodeDeregisterRequest struct {
	NodeIDs []string
	WriteRequest
}

// NodeSpecificRequest reads one node.
type NodeSpecificRequest struct {
	ID string
	QueryOptions
}

// NodeResponse carries one node (nil when not found).
type NodeResponse struct {
	Node *Node
	QueryMeta
}

// NodeListResponse carries nodes sorted by ID.
type NodeListResponse struct {
	Nodes []*Node
	QueryMeta
}
