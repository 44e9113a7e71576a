package fsm

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/claimd/claimd/structs"
)

// Node and plugin IDs where one is a prefix of another ("n1" of "n10",
// "host" of "hostdir"), so that key order and prefix scans are exercised.
var (
	summaryNodes   = []string{"n0", "n1", "n10", "n2"}
	summaryPlugins = []string{"host", "hostdir"}
)

// TestPluginSummary_MatchesFromScratch: after any sequence of node
// registers (their controllers admitted at once or left pending), status
// changes, deregistrations, admissions and revocations, the plugins the
// state store answers (summaries kept up incrementally, instances in
// their own table) equal the plugins summarised from scratch from the
// nodes and the admissions, and a snapshot restores to the same answers
// and the same bytes.
func TestPluginSummary_MatchesFromScratch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := &summaryRun{t: t, f: New(nil), admitted: map[[2]string]*structs.ControllerAdmission{}}
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			id := rapid.SampledFrom(summaryNodes).Draw(t, "node")
			existing, _ := h.f.State().NodeByID(nil, id)
			switch op := rapid.IntRange(0, 5).Draw(t, "op"); {
			case op <= 1 || existing == nil:
				h.register(drawSummaryNode(t, id), rapid.Bool().Draw(t, "auto admit"))
			case op == 2:
				st := rapid.SampledFrom([]structs.NodeStatus{structs.NodeStatusReady, structs.NodeStatusDown}).Draw(t, "status")
				h.apply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: id, Status: st})
			case op == 3:
				h.apply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{id}})
				for k := range h.admitted {
					if k[1] == id {
						delete(h.admitted, k)
					}
				}
			default:
				// Admit a controller the node runs, or revoke an
				// admission it has (admitting twice changes nothing).
				plug := rapid.SampledFrom(summaryPlugins).Draw(t, "admission plugin")
				req := &structs.PluginAdmissionRequest{PluginID: plug, NodeID: id}
				k := [2]string{plug, id}
				if _, ok := h.admitted[k]; ok && op == 5 {
					h.apply(structs.PluginRevokeControllerRequestType, req)
					delete(h.admitted, k)
				} else if existing.CSIControllerPlugins[plug] != nil {
					h.apply(structs.PluginAdmitControllerRequestType, req)
					if _, ok := h.admitted[k]; !ok {
						h.admitted[k] = &structs.ControllerAdmission{PluginID: plug, NodeID: id,
							Source: structs.AdmittedByOperator, CreateIndex: h.index}
					}
				}
			}
			checkPluginSummaries(t, h.f, h.admitted)
		}
		restored := New(nil)
		snap := mustSnapshotBytes(t, h.f)
		if err := restored.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatalf("exp: restore got: %v", err)
		}
		want, _ := h.f.State().Plugins(nil)
		got, _ := restored.State().Plugins(nil)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("exp: restored plugins %s got: %s", dumpPlugins(want), dumpPlugins(got))
		}
		if again := mustSnapshotBytes(t, restored); !bytes.Equal(snap, again) {
			t.Fatalf("exp: the restored state snapshots to the same bytes got: %d bytes, was %d", len(again), len(snap))
		}
		// The restored summaries keep being maintained incrementally.
		h2 := &summaryRun{t: t, f: restored, index: h.index, admitted: h.admitted}
		id := rapid.SampledFrom(summaryNodes).Draw(t, "last node")
		h2.register(drawSummaryNode(t, id), rapid.Bool().Draw(t, "last auto admit"))
		checkPluginSummaries(t, restored, h2.admitted)
	})
}

type summaryRun struct {
	t     *rapid.T
	f     *FSM
	index uint64
	// admitted is the model of the admissions, by plugin and node.
	admitted map[[2]string]*structs.ControllerAdmission
}

// register registers n, its controllers admitted as they come when auto.
func (r *summaryRun) register(n *structs.Node, auto bool) {
	req := &structs.NodeRegisterRequest{Node: n}
	if auto {
		req.AutoAdmit = structs.AdmittedByServerCert
	}
	r.apply(structs.NodeRegisterRequestType, req)
	for id := range n.CSIControllerPlugins {
		if _, ok := r.admitted[[2]string{id, n.ID}]; !ok && auto {
			r.admitted[[2]string{id, n.ID}] = &structs.ControllerAdmission{PluginID: id, NodeID: n.ID,
				Source: structs.AdmittedByServerCert, CreateIndex: r.index}
		}
	}
}

// apply applies one entry that must not be refused.
func (r *summaryRun) apply(mt structs.MessageType, req any) {
	data, err := structs.Encode(mt, req)
	if err != nil {
		r.t.Fatalf("encode: %v", err)
	}
	r.index++
	if err, ok := r.f.apply(r.index, data).(error); ok {
		r.t.Fatalf("apply type %d: exp: success got: %v", mt, err)
	}
}

// drawSummaryNode draws a node whose plugins vary in every field the
// summary reads: health, provider (sometimes empty), capabilities
// (sometimes absent) and whether a controller is required.
func drawSummaryNode(t *rapid.T, id string) *structs.Node {
	n := &structs.Node{ID: id, Name: id, SecretID: "secret-" + id,
		Status: rapid.SampledFrom([]structs.NodeStatus{structs.NodeStatusReady, structs.NodeStatusDown}).Draw(t, "status")}
	for _, p := range summaryPlugins {
		kinds := rapid.IntRange(0, 3).Draw(t, "kinds "+p) // bit 0 node, bit 1 controller
		if kinds&1 != 0 {
			info := drawInfo(t, p)
			if rapid.Bool().Draw(t, "node caps") {
				info.NodeCapabilities = &structs.CSINodeCapabilities{StageUnstageVolume: rapid.Bool().Draw(t, "stage"), GetVolumeStats: true}
			}
			if n.CSINodePlugins == nil {
				n.CSINodePlugins = map[string]*structs.CSIInfo{}
			}
			n.CSINodePlugins[p] = info
		}
		if kinds&2 != 0 {
			info := drawInfo(t, p)
			if rapid.Bool().Draw(t, "controller caps") {
				info.ControllerCapabilities = &structs.CSIControllerCapabilities{PublishUnpublish: rapid.Bool().Draw(t, "publish"), CreateDeleteVolume: true}
			}
			if n.CSIControllerPlugins == nil {
				n.CSIControllerPlugins = map[string]*structs.CSIInfo{}
			}
			n.CSIControllerPlugins[p] = info
		}
	}
	return n
}

func drawInfo(t *rapid.T, pluginID string) *structs.CSIInfo {
	return &structs.CSIInfo{
		PluginID:                 pluginID,
		Healthy:                  rapid.Bool().Draw(t, "healthy"),
		Provider:                 rapid.SampledFrom([]string{"", "prov-a", "prov-b"}).Draw(t, "provider"),
		ProviderVersion:          rapid.SampledFrom([]string{"", "1", "2"}).Draw(t, "version"),
		RequiresControllerPlugin: rapid.Bool().Draw(t, "requires"),
		MaxVolumes:               int64(rapid.IntRange(0, 2).Draw(t, "max")),
	}
}

// checkPluginSummaries compares every plugin the store answers, by ID, in
// the list and as a summary, with the plugins summarised from scratch from the nodes.
func checkPluginSummaries(t *rapid.T, f *FSM, admitted map[[2]string]*structs.ControllerAdmission) {
	nodes, _ := f.State().Nodes(nil)
	want := pluginsFromScratch(nodes, admitted)
	got, _ := f.State().Plugins(nil)
	stripped := make([]*structs.Plugin, len(got))
	for i, p := range got {
		c := p.Copy()
		c.CreateIndex, c.ModifyIndex = 0, 0
		stripped[i] = c
		one, _ := f.State().PluginByID(nil, p.ID)
		if !reflect.DeepEqual(one, p) {
			t.Fatalf("plugin %s exp: PluginByID as in Plugins %+v got: %+v", p.ID, p, one)
		}
		sum, _ := f.State().PluginSummary(nil, p.ID)
		noMaps := *p
		noMaps.Controllers, noMaps.Nodes, noMaps.Admissions = nil, nil, nil
		if sum == nil || !reflect.DeepEqual(*sum, noMaps) {
			t.Fatalf("plugin %s exp: PluginSummary as in Plugins without the maps got: %+v", p.ID, sum)
		}
	}
	if len(want) == 0 {
		want = nil
	}
	if len(stripped) == 0 {
		stripped = nil
	}
	if !reflect.DeepEqual(want, stripped) {
		t.Fatalf("exp: plugins from scratch %s got: %s", dumpPlugins(want), dumpPlugins(stripped))
	}
}

func dumpPlugins(ps []*structs.Plugin) string {
	var b bytes.Buffer
	for _, p := range ps {
		fmt.Fprintf(&b, "\n  %s provider=%q/%q required=%v healthy c%d n%d pending %d ccaps=%+v ncaps=%+v",
			p.ID, p.Provider, p.ProviderVersion, p.ControllerRequired, p.ControllersHealthy, p.NodesHealthy,
			p.ControllersPending, p.ControllerCapabilities, p.NodeCapabilities)
		for _, id := range structs.SortedKeys(p.Admissions) {
			fmt.Fprintf(&b, "\n    admitted %s %+v", id, *p.Admissions[id])
		}
		for _, m := range []map[string]*structs.CSIInfo{p.Controllers, p.Nodes} {
			for _, id := range structs.SortedKeys(m) {
				fmt.Fprintf(&b, "\n    %s %+v", id, *m[id])
			}
		}
	}
	return b.String()
}

// pluginsFromScratch is the reference: every plugin rebuilt from all the
// nodes, the way the plugin table was derived before it was incremental,
// with the admissions: a pending controller counts as pending and is the
// source of nothing.
func pluginsFromScratch(nodes []*structs.Node, admitted map[[2]string]*structs.ControllerAdmission) []*structs.Plugin {
	byID := map[string]*structs.Plugin{}
	add := func(kind string, n *structs.Node, id string, info *structs.CSIInfo) {
		p := byID[id]
		if p == nil {
			p = &structs.Plugin{ID: id}
			byID[id] = p
		}
		c := info.Copy()
		if n.Status != structs.NodeStatusReady && c.Healthy {
			c.Healthy = false
			c.HealthDescription = "node " + string(n.Status)
		}
		m := &p.Nodes
		if kind == "controller" {
			m = &p.Controllers
		}
		if *m == nil {
			*m = map[string]*structs.CSIInfo{}
		}
		(*m)[n.ID] = c
	}
	for _, n := range nodes {
		for id, info := range n.CSIControllerPlugins {
			add("controller", n, id, info)
		}
		for id, info := range n.CSINodePlugins {
			add("node", n, id, info)
		}
	}
	var out []*structs.Plugin
	for _, id := range structs.SortedKeys(byID) {
		p := byID[id]
		isAdmitted := func(nodeID string) bool { _, ok := admitted[[2]string{id, nodeID}]; return ok }
		for k, a := range admitted {
			if k[0] == id {
				if p.Admissions == nil {
					p.Admissions = map[string]*structs.ControllerAdmission{}
				}
				p.Admissions[k[1]] = a.Copy()
			}
		}
		for kind, m := range []map[string]*structs.CSIInfo{p.Controllers, p.Nodes} {
			for _, nodeID := range structs.SortedKeys(m) {
				info := m[nodeID]
				p.ControllerRequired = p.ControllerRequired || info.RequiresControllerPlugin
				if p.Provider == "" && info.Provider != "" && (kind == 1 || isAdmitted(nodeID)) {
					p.Provider, p.ProviderVersion = info.Provider, info.ProviderVersion
				}
			}
		}
		for _, nodeID := range structs.SortedKeys(p.Controllers) {
			info := p.Controllers[nodeID]
			if !isAdmitted(nodeID) {
				p.ControllersPending++
				continue
			}
			if p.ControllerCapabilities == nil && info.ControllerCapabilities != nil {
				p.ControllerCapabilities = info.ControllerCapabilities.Copy()
			}
			if info.Healthy {
				p.ControllersHealthy++
			}
		}
		for _, nodeID := range structs.SortedKeys(p.Nodes) {
			info := p.Nodes[nodeID]
			if p.NodeCapabilities == nil && info.NodeCapabilities != nil {
				p.NodeCapabilities = info.NodeCapabilities.Copy()
			}
			if info.Healthy {
				p.NodesHealthy++
			}
		}
		out = append(out, p)
	}
	return out
}

// BenchmarkNodeRegisterWithManyPluginInstances: one node re-registering
// (a fingerprint change: health flips) with 1,000 or 5,000 other nodes on
// the same plugin. The cost per register should not grow with the count.
func BenchmarkNodeRegisterWithManyPluginInstances(b *testing.B) {
	for _, existing := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", existing), func(b *testing.B) {
			h := mustNewHarness(b)
			for i := 0; i < existing; i++ {
				n := testNode(fmt.Sprintf("node-%05d", i))
				n.CSINodePlugins["hostdir"].Provider = "hostdir.claimd"
				n.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, Provider: "hostdir.claimd"}}
				h.registerNode(n)
			}
			reqs := make([][]byte, 2)
			for i := range reqs {
				n := testNode("node-02500")
				n.CSINodePlugins["hostdir"].Healthy = i == 0
				data, err := structs.Encode(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n})
				if err != nil {
					b.Fatal(err)
				}
				reqs[i] = data
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.index++
				if err, ok := h.f.apply(h.index, reqs[i%2]).(error); ok {
					b.Fatal(err)
				}
			}
		})
	}
}
