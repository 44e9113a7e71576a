package fsm

import "github.com/claimd/claimd/structs"

// syncPlugins brings the plugins table in line with one node's change:
// old is the node before the entry (nil when new), now after it (nil when
// deregistered). Only the plugins either version mentions are touched, so
// a node change costs O(its plugins × their instances), not a full
// rebuild. Plugins are derived state: they hold nothing that the nodes do
// not, and a plugin left without instances is deleted.
func syncPlugins(tx *txn, nodeID string, old, now *structs.Node) {
	var ids []string
	for _, n := range []*structs.Node{old, now} {
		if n == nil {
			continue
		}
		ids = append(ids, structs.SortedKeys(n.CSINodePlugins)...)
		ids = append(ids, structs.SortedKeys(n.CSIControllerPlugins)...)
	}
	for _, id := range sortedUnique(ids) {
		stored := getPlugin(tx, id)
		p := stored.Copy()
		if p == nil {
			p = &structs.Plugin{ID: id, CreateIndex: tx.index}
		}
		delete(p.Nodes, nodeID)
		delete(p.Controllers, nodeID)
		if now != nil {
			p.Nodes = setInstance(p.Nodes, nodeID, now, now.CSINodePlugins[id])
			p.Controllers = setInstance(p.Controllers, nodeID, now, now.CSIControllerPlugins[id])
		}
		if len(p.Nodes)+len(p.Controllers) == 0 {
			if stored != nil {
				tx.remove(TablePlugins, stored)
			}
			continue
		}
		summarizePlugin(p)
		p.ModifyIndex = tx.index
		tx.put(TablePlugins, p)
	}
}

// setInstance records a node's fingerprint in a plugin's instance map. The
// instance is healthy only when the fingerprint is and the node is ready: a
// plugin on a down node cannot serve anything.
func setInstance(m map[string]*structs.CSIInfo, nodeID string, n *structs.Node, info *structs.CSIInfo) map[string]*structs.CSIInfo {
	if info == nil {
		return m
	}
	c := info.Copy()
	if n.Status != structs.NodeStatusReady && c.Healthy {
		c.Healthy = false
		c.HealthDescription = "node " + string(n.Status)
	}
	if m == nil {
		m = map[string]*structs.CSIInfo{}
	}
	m[nodeID] = c
	return m
}

// summarizePlugin recomputes the derived fields from the instances, taking
// provider details from the lowest node ID so every server picks the same.
func summarizePlugin(p *structs.Plugin) {
	p.ControllersHealthy, p.NodesHealthy, p.ControllerRequired = 0, 0, false
	p.Provider, p.ProviderVersion = "", ""
	p.ControllerCapabilities, p.NodeCapabilities = nil, nil
	for _, m := range []map[string]*structs.CSIInfo{p.Controllers, p.Nodes} {
		for _, nodeID := range structs.SortedKeys(m) {
			info := m[nodeID]
			if info.RequiresControllerPlugin {
				p.ControllerRequired = true
			}
			if p.Provider == "" && info.Provider != "" {
				p.Provider, p.ProviderVersion = info.Provider, info.ProviderVersion
			}
		}
	}
	for _, nodeID := range structs.SortedKeys(p.Controllers) {
		if c := p.Controllers[nodeID].ControllerCapabilities; c != nil && p.ControllerCapabilities == nil {
			p.ControllerCapabilities = c.Copy()
		}
	}
	for _, nodeID := range structs.SortedKeys(p.Nodes) {
		if c := p.Nodes[nodeID].NodeCapabilities; c != nil && p.NodeCapabilities == nil {
			p.NodeCapabilities = c.Copy()
		}
	}
	for _, info := range p.Controllers {
		if info.Healthy {
			p.ControllersHealthy++
		}
	}
	for _, info := range p.Nodes {
		if info.Healthy {
			p.NodesHealthy++
		}
	}
	if len(p.Controllers) == 0 {
		p.Controllers = nil
	}
	if len(p.Nodes) == 0 {
		p.Nodes = nil
	}
}
