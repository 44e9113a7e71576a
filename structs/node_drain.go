package structs

import (
	"fmt"
	"sort"
)

// Drain takes a node out of service as one ordered step (issue 26): the
// node takes no new claims, its allocations stop, and their claims are
// released in the usual order (node detach, then controller detach) while
// the node's plugins keep serving; once no claim on the node is left, its
// node plugins may be stopped.

// NodeDrainRequest drains a node; with DryRun it only says what would
// happen and changes nothing.
type NodeDrainRequest struct {
	NodeID string
	DryRun bool
	WriteRequest
}

// Validate names the field at fault.
func (r *NodeDrainRequest) Validate() error {
	return ValidateID("node_id", r.NodeID)
}

// NodeDrainResponse is the plan (and, for a real drain, the index of the
// entries that started it).
type NodeDrainResponse struct {
	Plan  *DrainPlan
	Index uint64
}

// DrainPlan is what a drain of a node does, computed from the state.
type DrainPlan struct {
	NodeID string `json:"node_id"`
	// Allocs are the node's allocations the drain stops.
	Allocs []string `json:"allocs,omitempty"`
	// Volumes are the claims to release, in the order they are listed
	// (each one's steps run in order; volumes proceed side by side).
	Volumes []*DrainVolume `json:"volumes,omitempty"`
	// PluginsKeepUp are the node plugins on this node that must keep
	// serving until the drain is done: the node detaches need them.
	PluginsKeepUp []string `json:"plugins_keep_up,omitempty"`
	// Blockers are what would keep the drain from finishing now.
	Blockers []string `json:"blockers,omitempty"`
}

// DrainVolume is one claim the drain releases.
type DrainVolume struct {
	VolumeID   string     `json:"volume_id"`
	AllocID    string     `json:"alloc_id"`
	PluginID   string     `json:"plugin_id"`
	Mode       ClaimMode  `json:"mode"`
	State      ClaimState `json:"state"`
	AccessMode AccessMode `json:"access_mode"`
	// Steps in order, as an operator reads them.
	Steps []string `json:"steps"`
	// Blockers are what stops this claim's release now.
	Blockers []string `json:"blockers,omitempty"`
}

// NodeDrainStatusRequest reads a drain's progress (a blocking query).
type NodeDrainStatusRequest struct {
	NodeID string
	QueryOptions
}

// NodeDrainStatus is a drain's progress.
type NodeDrainStatus struct {
	NodeID      string          `json:"node_id"`
	Eligibility NodeEligibility `json:"eligibility"`
	// AllocsLeft are the node's allocations not yet terminal.
	AllocsLeft []string `json:"allocs_left,omitempty"`
	// ClaimsLeft are the claims on the node not yet freed.
	ClaimsLeft []*DrainClaimLeft `json:"claims_left,omitempty"`
	// Done: the node is ineligible and nothing is left; its node plugins
	// may now be stopped.
	Done bool `json:"done"`
}

// DrainClaimLeft is one claim a drain still waits for.
type DrainClaimLeft struct {
	VolumeID string     `json:"volume_id"`
	AllocID  string     `json:"alloc_id"`
	State    ClaimState `json:"state"`
	// LastError is the release's last error on the leader, if it retries.
	LastError string `json:"last_error,omitempty"`
}

// NodeDrainStatusResponse carries the status.
type NodeDrainStatusResponse struct {
	Status *NodeDrainStatus
	QueryMeta
}

// NodeEligibilityResponse is the index of the change.
type NodeEligibilityResponse struct {
	Index uint64
}

// PlanDrain computes a drain's plan from a node, its allocations, the
// claims on it (with their volumes) and the plugins involved. It is a pure
// function so the dry run and the real drain say the same.
func PlanDrain(node *Node, allocs []*Alloc, vols []*Volume, plugins map[string]*Plugin) *DrainPlan {
	p := &DrainPlan{NodeID: node.ID}
	for _, a := range allocs {
		if !a.Terminal() {
			p.Allocs = append(p.Allocs, a.ID)
		}
	}
	sort.Strings(p.Allocs)
	keep := map[string]bool{}
	blockers := map[string]bool{}
	for _, v := range vols {
		for _, c := range v.AllClaims() {
			if c.NodeID != node.ID {
				continue
			}
			dv := &DrainVolume{VolumeID: v.ID, AllocID: c.AllocID, PluginID: v.PluginID, Mode: c.Mode, State: c.State, AccessMode: v.AccessMode}
			plug := plugins[v.PluginID]
			dv.Steps = append(dv.Steps, fmt.Sprintf("node detach (NodeUnpublish, NodeUnstage) on %s by its node plugin %s", node.ID, v.PluginID))
			if plug == nil || plug.ControllerRequired {
				dv.Steps = append(dv.Steps, fmt.Sprintf("controller detach (ControllerUnpublish) by a controller of %s", v.PluginID))
			}
			keep[v.PluginID] = true
			if node.Status != NodeStatusReady {
				switch EffectiveNodeLost(c, v) {
				case NodeLostFence:
					dv.Blockers = append(dv.Blockers, fmt.Sprintf("node %s is %s: the node detach is skipped once its lease has run out (node_lost fence)", node.ID, node.Status))
				case NodeLostManual:
					dv.Blockers = append(dv.Blockers, fmt.Sprintf("node %s is %s: node_lost manual waits for an operator's volume detach", node.ID, node.Status))
				default:
					dv.Blockers = append(dv.Blockers, fmt.Sprintf("node %s is %s: the node detach waits for it to come back (node_lost wait)", node.ID, node.Status))
				}
			} else if info := node.CSINodePlugins[v.PluginID]; info == nil || !info.Healthy {
				dv.Blockers = append(dv.Blockers, fmt.Sprintf("node plugin %s is not healthy on %s: the node detach waits for it", v.PluginID, node.ID))
			}
			if plug != nil && plug.ControllerRequired && plug.ControllersHealthy == 0 {
				dv.Blockers = append(dv.Blockers, fmt.Sprintf("no healthy controller of %s: the controller detach waits for one", v.PluginID))
			}
			for _, b := range dv.Blockers {
				blockers[b] = true
			}
			p.Volumes = append(p.Volumes, dv)
		}
	}
	sort.Slice(p.Volumes, func(i, j int) bool {
		if p.Volumes[i].VolumeID != p.Volumes[j].VolumeID {
			return p.Volumes[i].VolumeID < p.Volumes[j].VolumeID
		}
		return p.Volumes[i].AllocID < p.Volumes[j].AllocID
	})
	p.PluginsKeepUp = SortedKeys(keep)
	p.Blockers = SortedKeys(blockers)
	return p
}
