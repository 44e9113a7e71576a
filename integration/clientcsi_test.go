package integration

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// Issue 4 item 6: client agents, CSI plugins and server-to-client calls,
// end to end: real servers on loopback TCP, real client agents whose dials
// go through the partitionable network, real hostdir plugins on unix
// sockets. What reached a plugin is read from its own audit log.

// csiEnv is a three-server cluster with storage "hostdir" whose client
// agents are each pinned to a chosen server, so that a test knows which
// server holds which node's session.
type csiEnv struct {
	c       *harness.Cluster
	leader  *harness.TestServer
	root    string
	apis    map[string]*api.Client // by server name
	plugins map[string]*harness.TestPlugin
	clients map[string]*harness.TestClient
}

func newCSIEnv(t *testing.T) *csiEnv {
	t.Helper()
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	e := &csiEnv{c: c, leader: c.WaitForLeader(electionWait), root: filepath.Join(t.TempDir(), "storage"),
		apis: map[string]*api.Client{}, plugins: map[string]*harness.TestPlugin{}, clients: map[string]*harness.TestClient{}}
	// These tests drive the servers' own node-call shim (ClientCSI.*,
	// Status.HasNodeConn), which only a server may call: the clients
	// present a server certificate.
	for _, s := range c.Servers {
		e.apis[s.Name] = s.ServerIdentityClient()
	}
	return e
}

// followers returns the two followers in slot order.
func (e *csiEnv) followers(t *testing.T) (*harness.TestServer, *harness.TestServer) {
	t.Helper()
	var fs []*harness.TestServer
	for _, s := range e.c.Servers {
		if s != e.leader {
			fs = append(fs, s)
		}
	}
	if len(fs) != 2 {
		t.Fatalf("followers exp: 2 got: %d", len(fs))
	}
	return fs[0], fs[1]
}

// addNode starts a hostdir plugin named name in mode, and a client agent
// running it that connects to first (the other servers after it).
// newWorkerAndController: a worker w1 on one follower, a controller node
// "ctrl" on the other, the plugin seen healthy, and the leader's API.
func newWorkerAndController(t *testing.T) (*csiEnv, *api.Client) {
	t.Helper()
	e := newCSIEnv(t)
	f1, f2 := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	e.addNode(t, "ctrl", hostdir.ModeController, f2)
	e.waitPlugin(t, 1, 1)
	return e, e.apis[e.leader.Name]
}

func (e *csiEnv) addNode(t *testing.T, name string, mode hostdir.Mode, first *harness.TestServer) {
	t.Helper()
	p := harness.StartPlugin(t, name, mode, e.root)
	e.plugins[name] = p
	e.clients[name] = e.c.StartClient(name, e.c.ServerOrder(first), p.Config())
	e.clients[name].AdmitControllers() // nothing for a node plugin
}

func (e *csiEnv) nodeID(name string) string { return e.clients[name].NodeID() }

// checkLeader fails the test if leadership moved: the test's premise (which
// server holds which session relative to the leader) would no longer hold.
func (e *csiEnv) checkLeader(t *testing.T) {
	t.Helper()
	if l := e.c.Leader(); l != e.leader {
		t.Fatalf("leader during the test exp: %s (unchanged) got: %v", e.leader.Name, l)
	}
}

// plugin reads plugin "hostdir" through cl.
func (e *csiEnv) plugin(t *testing.T, cl *api.Client) (*structs.Plugin, error) {
	t.Helper()
	p, _, err := cl.Plugin(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
	return p, err
}

// waitPlugin polls until plugin "hostdir" has exactly nodes healthy node
// instances and controllers healthy controllers, and requires a controller;
// then until every running server applied that state, since the
// controller-target checks of calls made on a follower read its own state.
func (e *csiEnv) waitPlugin(t *testing.T, nodes, controllers int) {
	t.Helper()
	defer func() { e.c.WaitForApplied(e.leader.Server().Raft().AppliedIndex(), applyWait) }()
	harness.WaitFor(t, applyWait, func() error {
		p, err := e.plugin(t, e.apis[e.leader.Name])
		if err != nil {
			return err
		}
		if p.NodesHealthy != nodes || p.ControllersHealthy != controllers || !p.ControllerRequired {
			return fmt.Errorf("plugin exp: %d healthy nodes, %d healthy controllers, controller required got: %+v", nodes, controllers, p)
		}
		return nil
	})
}

// sessionHolders asks every running server, by Status.HasNodeConn, whether
// it holds nodeID's session, and checks the answers against the servers'
// node-connection registries.
func (e *csiEnv) sessionHolders(t *testing.T, nodeID string) ([]*harness.TestServer, error) {
	t.Helper()
	var out []*harness.TestServer
	for _, s := range e.c.Servers {
		if !s.Running() {
			continue
		}
		var resp structs.NodeConnResponse
		if err := e.apis[s.Name].Call(harness.Ctx(t, 10*time.Second), "Status.HasNodeConn", &structs.NodeConnRequest{NodeID: nodeID}, &resp); err != nil {
			return nil, fmt.Errorf("%s: Status.HasNodeConn: %w", s.Name, err)
		}
		if resp.Connected {
			if resp.Established == 0 {
				return nil, fmt.Errorf("%s: HasNodeConn for %s exp: established time got: 0", s.Name, nodeID)
			}
			out = append(out, s)
		}
	}
	reg := e.c.NodeConnHolders(nodeID)
	if fmt.Sprint(serverNames(reg)) != fmt.Sprint(serverNames(out)) {
		return nil, fmt.Errorf("holders of %s by registry exp: %v (as HasNodeConn says) got: %v", nodeID, serverNames(out), serverNames(reg))
	}
	return out, nil
}

// waitSession polls until exactly one running server holds nodeID's session
// and it is want (nil: any server but not), and returns it.
func (e *csiEnv) waitSession(t *testing.T, nodeID string, want, not *harness.TestServer) *harness.TestServer {
	t.Helper()
	var holder *harness.TestServer
	harness.WaitFor(t, applyWait, func() error {
		hs, err := e.sessionHolders(t, nodeID)
		if err != nil {
			return err
		}
		if len(hs) != 1 {
			return fmt.Errorf("servers holding node %s's session exp: exactly one got: %v", nodeID, serverNames(hs))
		}
		if want != nil && hs[0] != want {
			return fmt.Errorf("server holding node %s's session exp: %s got: %s", nodeID, want.Name, hs[0].Name)
		}
		if not != nil && hs[0] == not {
			return fmt.Errorf("server holding node %s's session exp: not %s got: %s", nodeID, not.Name, hs[0].Name)
		}
		holder = hs[0]
		return nil
	})
	return holder
}

func serverNames(ss []*harness.TestServer) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func (e *csiEnv) register(t *testing.T, cl *api.Client, id string, mode structs.AccessMode) {
	t.Helper()
	v := testVolume(id)
	v.AccessMode = mode
	if _, err := cl.RegisterVolumes(harness.Ctx(t, 30*time.Second), v); err != nil {
		t.Fatalf("register volume %s: %v", id, err)
	}
}

// place places an allocation on the named worker, asking for volumes (write
// claims).
func (e *csiEnv) place(t *testing.T, cl *api.Client, allocID, worker string, vols ...string) {
	t.Helper()
	a := &structs.Alloc{ID: allocID, NodeID: e.nodeID(worker)}
	for _, v := range vols {
		a.Volumes = append(a.Volumes, &structs.AllocVolumeRequest{VolumeID: v})
	}
	if _, err := cl.PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatalf("place alloc %s: %v", allocID, err)
	}
}

// placeReader places an allocation on the named worker asking for vol
// read-only.
func (e *csiEnv) placeReader(t *testing.T, cl *api.Client, allocID, worker, vol string) {
	t.Helper()
	a := &structs.Alloc{ID: allocID, NodeID: e.nodeID(worker), Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol, ReadOnly: true}}}
	if _, err := cl.PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatalf("place alloc %s: %v", allocID, err)
	}
}

func (e *csiEnv) waitAlloc(t *testing.T, cl *api.Client, allocID string, want structs.AllocClientStatus, timeout time.Duration) {
	t.Helper()
	harness.WaitFor(t, timeout, func() error {
		a, _, err := cl.Alloc(harness.Ctx(t, 10*time.Second), allocID, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != want && a.Terminal() {
			t.Fatalf("alloc %s client status exp: %s got: %s, final (%s)", allocID, want, a.ClientStatus, a.ClientDescription)
		}
		if a.ClientStatus != want {
			return fmt.Errorf("alloc %s client status exp: %s got: %s (%s)", allocID, want, a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
}

func (e *csiEnv) volume(t *testing.T, cl *api.Client, id string) *structs.Volume {
	t.Helper()
	v, _, err := cl.Volume(harness.Ctx(t, 10*time.Second), id, structs.QueryOptions{})
	if err != nil {
		t.Fatalf("read volume %s: %v", id, err)
	}
	return v
}

// attachReq is a controller publish of ext-<vol> to ext-<worker>.
func csiAttachReq(ctrlNode, plugin, vol, worker string) *structs.ClientCSIControllerAttachRequest {
	return &structs.ClientCSIControllerAttachRequest{
		CSIControllerQuery: structs.CSIControllerQuery{ControllerNodeID: ctrlNode, PluginID: plugin},
		VolumeID:           vol, ExternalID: "ext-" + vol, ExternalNodeID: "ext-" + worker,
		AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
	}
}

func csiAttach(t *testing.T, cl *api.Client, req *structs.ClientCSIControllerAttachRequest) (*structs.ClientCSIControllerAttachResponse, error) {
	t.Helper()
	var resp structs.ClientCSIControllerAttachResponse
	err := cl.Call(harness.Ctx(t, 30*time.Second), "ClientCSI.ControllerAttachVolume", req, &resp)
	return &resp, err
}

// csiCalls counts audit entries of method; vol, node, result and target
// (a substring) filter when not empty ("ok" is a success).
func csiCalls(entries []hostdir.AuditEntry, method, vol, node, result, target string) int {
	n := 0
	for _, en := range entries {
		if en.Method != method || vol != "" && en.Volume != vol || node != "" && en.Node != node ||
			result != "" && en.Result != result || target != "" && !strings.Contains(en.Target, target) {
			continue
		}
		n++
	}
	return n
}

// failedCalls counts audit entries of method on vol that did not succeed.
func failedCalls(entries []hostdir.AuditEntry, method, vol string) int {
	return csiCalls(entries, method, vol, "", "", "") - csiCalls(entries, method, vol, "", "ok", "")
}

// checkErr fails unless err has the code of want and its text contains
// every one of parts.
func checkCodedErr(t *testing.T, what string, err, want error, parts ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s exp: %v got: %v", what, want, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: error text exp: contains %q got: %q", what, p, err)
		}
	}
}

// A claim sent through a follower reaches the leader, and the controller
// publish runs on the controller node although that node's agent is
// connected to another follower, not to the leader: one hop from the leader
// to the server holding the session (seeds 1 and 5). ControllerPublish
// runs exactly once per new claim, with the claiming node's external ID,
// its publish context is stored on the claim, and a re-claim by the same
// allocation publishes nothing (seed 3, S5).
func TestClientCSI_ClaimViaFollower_PublishesOnControllerOfAnotherServer(t *testing.T) {
	e := newCSIEnv(t)
	f1, f2 := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f2)
	e.addNode(t, "ctrl", hostdir.ModeController, f1)
	e.waitPlugin(t, 1, 1)
	w1, ctrl := e.nodeID("w1"), e.nodeID("ctrl")
	e.waitSession(t, w1, f2, nil)
	e.waitSession(t, ctrl, f1, nil)

	// Everything goes through follower f2, which is also where the worker's
	// agent sends its claims.
	cl := e.apis[f2.Name]
	e.register(t, cl, "v1", structs.AccessModeSingleNodeWriter)
	e.register(t, cl, "v2", structs.AccessModeMultiNodeMultiWriter)
	e.place(t, cl, "a1", "w1", "v1")
	e.place(t, cl, "a2", "w1", "v2")
	e.place(t, cl, "a3", "w1", "v2")
	for _, a := range []string{"a1", "a2", "a3"} {
		e.waitAlloc(t, cl, a, structs.AllocClientRunning, applyWait)
	}
	e.checkLeader(t)
	if hs := e.c.NodeConnHolders(ctrl); len(hs) != 1 || hs[0] != f1 {
		t.Fatalf("controller session holder after the claims exp: [%s] (not the leader %s) got: %v", f1.Name, e.leader.Name, serverNames(hs))
	}

	// The controller published each volume once, to the worker: a2 and a3
	// on w1 share w1's attachment of v2 (an attachment is per volume and
	// node), and no re-claim published again (S5).
	audit := e.plugins["ctrl"].Audit()
	for vol, want := range map[string]int{"ext-v1": 1, "ext-v2": 1} {
		if n := csiCalls(audit, "ControllerPublishVolume", vol, "", "", ""); n != want {
			t.Fatalf("S5: ControllerPublish calls of %s exp: %d (one per attachment) got: %d in %+v", vol, want, n, audit)
		}
		if n := csiCalls(audit, "ControllerPublishVolume", vol, "ext-w1", "ok", ""); n != want {
			t.Fatalf("successful ControllerPublish of %s to ext-w1 exp: %d got: %d in %+v", vol, want, n, audit)
		}
	}
	// The worker's node plugin did only node calls, with each alloc's path.
	nodeAudit := e.plugins["w1"].Audit()
	for _, en := range nodeAudit {
		if strings.HasPrefix(en.Method, "Controller") {
			t.Fatalf("controller call on the node-only plugin exp: none got: %+v", en)
		}
	}
	for _, a := range []string{"a1", "a2", "a3"} {
		if n := csiCalls(nodeAudit, "NodePublishVolume", "", "ext-w1", "ok", "/per-alloc/"+a+"/"); n != 1 {
			t.Fatalf("NodePublish for alloc %s on w1 exp: 1 got: %d", a, n)
		}
	}

	// The publish context is on the claims in the replicated state, read
	// through the other follower.
	other := e.apis[f1.Name]
	for vol, allocs := range map[string][]string{"v1": {"a1"}, "v2": {"a2", "a3"}} {
		v := e.volume(t, other, vol)
		for _, a := range allocs {
			c := v.WriteClaims[a]
			if c == nil || c.State != structs.ClaimStateTaken {
				t.Fatalf("claim of %s on %s exp: taken got: %+v", a, vol, c)
			}
			if c.ExternalNodeID != "ext-w1" || c.PublishContext[hostdir.PublishContextNode] != "ext-w1" {
				t.Fatalf("claim of %s on %s exp: external node ext-w1 and publish context naming it got: %q %v",
					a, vol, c.ExternalNodeID, c.PublishContext)
			}
		}
	}

	// Re-claims by the same allocations (a client retrying after a lost
	// reply) are idempotent: not new, the stored publish context, and no
	// second ControllerPublish.
	for vol, allocs := range map[string][]string{"v1": {"a1"}, "v2": {"a2", "a3"}} {
		for _, a := range allocs {
			resp, err := other.Claim(harness.Ctx(t, 30*time.Second), &structs.VolumeClaimRequest{
				VolumeID: vol, AllocID: a, NodeID: w1, Mode: structs.ClaimModeWrite})
			if err != nil || resp.New || resp.Claim == nil {
				t.Fatalf("re-claim of %s by %s exp: existing claim, not new got: %+v %v", vol, a, resp, err)
			}
			if got := resp.Claim.PublishContext[hostdir.PublishContextNode]; got != "ext-w1" {
				t.Fatalf("re-claim of %s by %s publish context exp: node ext-w1 got: %v", vol, a, resp.Claim.PublishContext)
			}
		}
	}
	if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerPublishVolume", "", "", "", ""); n != 2 {
		t.Fatalf("S5: ControllerPublish calls after re-claims exp: 2 (no new claim) got: %d", n)
	}
}

// A node call made on a server that does not hold the node's session is
// forwarded once, to the server that does; a call already marked
// forwarded is delivered only over a local session, never hopped again
// (seed 5). Controller calls obey the same rule.
func TestClientCSI_NodeCallForwardedOnce(t *testing.T) {
	e := newCSIEnv(t)
	f1, f2 := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	e.addNode(t, "ctrl", hostdir.ModeController, e.leader)
	e.waitPlugin(t, 1, 1)
	w1, ctrl := e.nodeID("w1"), e.nodeID("ctrl")
	e.waitSession(t, w1, f1, nil)
	e.waitSession(t, ctrl, e.leader, nil)

	// Mount a volume on w1 so that the detach has something to undo.
	e.register(t, e.apis[f2.Name], "v1", structs.AccessModeSingleNodeWriter)
	e.place(t, e.apis[f2.Name], "a1", "w1", "v1")
	e.waitAlloc(t, e.apis[f2.Name], "a1", structs.AllocClientRunning, applyWait)

	detach := structs.ClientCSINodeDetachRequest{NodeID: w1, PluginID: "hostdir", VolumeID: "v1", ExternalID: "ext-v1",
		AllocID: "a1", AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}
	call := func(s *harness.TestServer, method string, args any) error {
		var reply struct{}
		return e.apis[s.Name].Call(harness.Ctx(t, 30*time.Second), method, args, &reply)
	}
	unpublishes := func() int {
		return csiCalls(e.plugins["w1"].Audit(), "NodeUnpublishVolume", "ext-v1", "ext-w1", "ok", "/per-alloc/a1/")
	}

	// A follower makes no storage call of its own (decision 46): only
	// the leader does. Its no_leader answer is the result, not a reason to
	// retry (the api client's default retried it for 10 s first).
	var reply struct{}
	err := f2.ServerIdentityClientNoRetry().Call(harness.Ctx(t, 30*time.Second), "ClientCSI.NodeDetachVolume", &detach, &reply)
	checkCodedErr(t, "node detach made at a follower", err, structs.ErrNoLeader, "storage calls are made only by the leader")
	// Through the leader, which does not hold w1's session: one hop to f1.
	if err := call(e.leader, "ClientCSI.NodeDetachVolume", &detach); err != nil {
		t.Fatalf("node detach through a server without the session exp: forwarded, success got: %v", err)
	}
	audit := e.plugins["w1"].Audit()
	if n := unpublishes(); n != 1 {
		t.Fatalf("NodeUnpublish of a1's path on w1 exp: 1 got: %d in %+v", n, audit)
	}
	if n := csiCalls(audit, "NodeUnstageVolume", "ext-v1", "ext-w1", "ok", ""); n != 1 {
		t.Fatalf("NodeUnstage of v1 on w1 (no other user) exp: 1 got: %d in %+v", n, audit)
	}

	// Already forwarded, at servers without the session: unavailable, and
	// nothing reaches the node.
	fwd := detach
	fwd.Forwarded = true
	before := len(e.plugins["w1"].Audit())
	for _, s := range []*harness.TestServer{f2, e.leader} {
		err := call(s, "ClientCSI.NodeDetachVolume", &fwd)
		checkCodedErr(t, "forwarded node call at "+s.Name+" (no session)", err, structs.ErrUnavailable, "not connected to this server")
	}
	if after := len(e.plugins["w1"].Audit()); after != before {
		t.Fatalf("plugin calls on w1 after refused forwarded calls exp: %d (none new) got: %d", before, after)
	}
	// Already forwarded, at the holder: delivered over its own session.
	if err := call(f1, "ClientCSI.NodeDetachVolume", &fwd); err != nil {
		t.Fatalf("forwarded node call at the session holder exp: success got: %v", err)
	}
	if n := unpublishes(); n != 2 {
		t.Fatalf("NodeUnpublish of a1's path on w1 exp: 2 (idempotent repeat delivered) got: %d", n)
	}

	// Controller calls: made by the leader, which holds the controller's
	// session; marked forwarded at a follower, refused.
	cdetach := structs.ClientCSIControllerDetachRequest{
		CSIControllerQuery: structs.CSIControllerQuery{PluginID: "hostdir"},
		VolumeID:           "v1", ExternalID: "ext-v1", ExternalNodeID: "ext-w1"}
	if err := call(e.leader, "ClientCSI.ControllerDetachVolume", &cdetach); err != nil {
		t.Fatalf("controller detach through the leader exp: success got: %v", err)
	}
	if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerUnpublishVolume", "ext-v1", "ext-w1", "ok", ""); n != 1 {
		t.Fatalf("ControllerUnpublish of v1 from ext-w1 exp: 1 got: %d", n)
	}
	cfwd := cdetach
	cfwd.ControllerNodeID, cfwd.Forwarded = ctrl, true
	err = call(f1, "ClientCSI.ControllerDetachVolume", &cfwd)
	checkCodedErr(t, "forwarded controller call at a follower (no session)", err, structs.ErrUnavailable, "not connected to this server")
	if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerUnpublishVolume", "", "", "", ""); n != 1 {
		t.Fatalf("ControllerUnpublish calls after a refused forwarded call exp: 1 got: %d", n)
	}
	e.checkLeader(t)

	// A node connected to no server: unavailable, at once.
	e.clients["w1"].Stop()
	harness.WaitFor(t, applyWait, func() error {
		if hs := e.c.NodeConnHolders(w1); len(hs) != 0 {
			return fmt.Errorf("holders of a stopped agent's session exp: none got: %v", serverNames(hs))
		}
		return nil
	})
	err = call(e.leader, "ClientCSI.NodeDetachVolume", &detach)
	checkCodedErr(t, "node call for a node connected nowhere", err, structs.ErrUnavailable, "not connected to any server")
}

// A controller call naming a controller node that does not run a healthy
// controller of the plugin is refused with an error that names the field;
// an unknown plugin is not_found (seed 1). Nothing reaches any plugin.
// Naming the right node, or none, reaches the controller.
func TestClientCSI_ControllerNodeWithoutPlugin_IsRefused(t *testing.T) {
	e := newCSIEnv(t)
	f1, f2 := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	e.addNode(t, "ctrl", hostdir.ModeController, f2)
	e.waitPlugin(t, 1, 1)
	w1, ctrl := e.nodeID("w1"), e.nodeID("ctrl")
	cl := e.apis[e.leader.Name] // storage calls are the leader's (decision 46)

	_, err := csiAttach(t, cl, csiAttachReq(w1, "hostdir", "v1", "w1"))
	checkCodedErr(t, "controller attach naming a node-only node", err, structs.ErrInvalid, "controller_node_id", w1, "hostdir")
	_, err = csiAttach(t, cl, csiAttachReq("no-such-node", "hostdir", "v1", "w1"))
	checkCodedErr(t, "controller attach naming an unknown node", err, structs.ErrInvalid, "controller_node_id", "no-such-node")
	_, err = csiAttach(t, cl, csiAttachReq(ctrl, "nope", "v1", "w1"))
	checkCodedErr(t, "controller attach for an unknown plugin", err, structs.ErrNotFound, "plugin", "nope")
	_, err = csiAttach(t, cl, csiAttachReq("", "", "v1", "w1"))
	checkCodedErr(t, "controller attach without a plugin", err, structs.ErrInvalid, "plugin_id")
	var dreply structs.ClientCSIControllerDetachResponse
	err = cl.Call(harness.Ctx(t, 30*time.Second), "ClientCSI.ControllerDetachVolume", &structs.ClientCSIControllerDetachRequest{
		CSIControllerQuery: structs.CSIControllerQuery{ControllerNodeID: w1, PluginID: "hostdir"},
		VolumeID:           "v1", ExternalID: "ext-v1", ExternalNodeID: "ext-w1"}, &dreply)
	checkCodedErr(t, "controller detach naming a node-only node", err, structs.ErrInvalid, "controller_node_id", w1)

	// A call marked forwarded skips the servers' check; the agent itself
	// refuses a controller call for a plugin it runs only as a node plugin.
	holder := e.waitSession(t, w1, f1, nil)
	fwd := csiAttachReq(w1, "hostdir", "v1", "w1")
	fwd.Forwarded = true
	_, err = csiAttach(t, e.apis[holder.Name], fwd)
	checkCodedErr(t, "forwarded controller attach delivered to a node-only agent", err, structs.ErrInvalid, "plugin_id", "controller")

	for name, p := range e.plugins {
		if n := csiCalls(p.Audit(), "ControllerPublishVolume", "", "", "", "") +
			csiCalls(p.Audit(), "ControllerUnpublishVolume", "", "", "", ""); n != 0 {
			t.Fatalf("controller calls on %s after refused requests exp: 0 got: %d", name, n)
		}
	}

	// Naming the controller node, or none, reaches it.
	for _, named := range []string{ctrl, ""} {
		resp, err := csiAttach(t, cl, csiAttachReq(named, "hostdir", "v1", "w1"))
		if err != nil {
			t.Fatalf("controller attach naming %q exp: success got: %v", named, err)
		}
		if resp.ControllerNodeID != ctrl || resp.PublishContext[hostdir.PublishContextNode] != "ext-w1" {
			t.Fatalf("controller attach naming %q exp: answered by %s with context for ext-w1 got: %+v", named, ctrl, resp)
		}
	}
	if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerPublishVolume", "ext-v1", "ext-w1", "ok", ""); n != 2 {
		t.Fatalf("ControllerPublish of v1 to ext-w1 exp: 2 got: %d", n)
	}
}

// With several controllers, a controller that does not answer is skipped
// for the next healthy one; one that answers with a refusal is not (another
// controller of the same storage would refuse alike); a controller whose
// plugin turned unhealthy can no longer be named; with none healthy, the
// shim and new claims are unschedulable (seed 1).
func TestClientCSI_ControllerCall_TriesNextHealthyController(t *testing.T) {
	e := newCSIEnv(t)
	f1, f2 := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	e.addNode(t, "c1", hostdir.ModeController, f2)
	e.addNode(t, "c2", hostdir.ModeController, e.leader)
	e.waitPlugin(t, 1, 2)
	c1, c2 := e.nodeID("c1"), e.nodeID("c2")
	cl := e.apis[e.leader.Name] // storage calls are the leader's (decision 46)

	// c1 fails once with Unavailable: the call that named it is answered by c2.
	e.plugins["c1"].SetControl(hostdir.Control{Fail: map[string]int{"ControllerPublishVolume": 1}})
	resp, err := csiAttach(t, cl, csiAttachReq(c1, "hostdir", "v1", "w1"))
	if err != nil || resp.ControllerNodeID != c2 {
		t.Fatalf("attach naming c1 while c1 is unavailable exp: answered by c2 (%s) got: %+v %v", c2, resp, err)
	}
	if n := failedCalls(e.plugins["c1"].Audit(), "ControllerPublishVolume", "ext-v1"); n != 1 {
		t.Fatalf("failed ControllerPublish of v1 on c1 exp: 1 got: %d", n)
	}
	if n := csiCalls(e.plugins["c2"].Audit(), "ControllerPublishVolume", "ext-v1", "ext-w1", "ok", ""); n != 1 {
		t.Fatalf("ControllerPublish of v1 on c2 exp: 1 got: %d", n)
	}

	// c1 refuses (FailedPrecondition → conflict): not retried on c2.
	e.plugins["c1"].SetControl(hostdir.Control{Fail: map[string]int{"ControllerPublishVolume": 1},
		FailCode: map[string]string{"ControllerPublishVolume": "FailedPrecondition"}})
	_, err = csiAttach(t, cl, csiAttachReq(c1, "hostdir", "v2", "w1"))
	checkCodedErr(t, "attach refused by the named controller", err, structs.ErrConflict)
	if n := csiCalls(e.plugins["c2"].Audit(), "ControllerPublishVolume", "ext-v2", "", "", ""); n != 0 {
		t.Fatalf("ControllerPublish of v2 on c2 after c1 refused exp: 0 got: %d", n)
	}

	// c1's plugin stops: once the plugin table says so, c1 cannot be named
	// and the server picks c2 itself.
	e.plugins["c1"].Stop()
	e.waitPlugin(t, 1, 1)
	if p, err := e.plugin(t, cl); err != nil || p.Controllers[c1] == nil || p.Controllers[c1].Healthy {
		t.Fatalf("c1's controller instance exp: present, unhealthy got: %+v %v", p, err)
	}
	_, err = csiAttach(t, cl, csiAttachReq(c1, "hostdir", "v3", "w1"))
	checkCodedErr(t, "attach naming an unhealthy controller", err, structs.ErrInvalid, "controller_node_id", c1)
	for i := 0; i < 3; i++ {
		resp, err := csiAttach(t, cl, csiAttachReq("", "hostdir", "v3", "w1"))
		if err != nil || resp.ControllerNodeID != c2 {
			t.Fatalf("attach naming no controller exp: answered by c2 (%s) got: %+v %v", c2, resp, err)
		}
	}
	if n := csiCalls(e.plugins["c1"].Audit(), "ControllerPublishVolume", "ext-v3", "", "", ""); n != 0 {
		t.Fatalf("ControllerPublish of v3 on the stopped c1 exp: 0 got: %d", n)
	}

	// No healthy controller left: unschedulable, for the shim and for a
	// new claim on a plugin that requires one.
	e.plugins["c2"].Stop()
	e.waitPlugin(t, 1, 0)
	_, err = csiAttach(t, cl, csiAttachReq("", "hostdir", "v4", "w1"))
	checkCodedErr(t, "attach with no healthy controller", err, structs.ErrUnschedulable, "no healthy controller")
	e.register(t, cl, "v4", structs.AccessModeSingleNodeWriter)
	e.place(t, cl, "a4", "w1", "v4")
	_, err = cl.Claim(harness.Ctx(t, 30*time.Second), &structs.VolumeClaimRequest{
		VolumeID: "v4", AllocID: "a4", NodeID: e.nodeID("w1"), Mode: structs.ClaimModeWrite})
	checkCodedErr(t, "claim with no healthy controller", err, structs.ErrUnschedulable, "controller")
}

// A client agent that loses its server moves its session to another and
// keeps its node: same ID, no second node, still ready (its heartbeats
// reach the leader through the new server), its running allocation is not
// lost, and a new allocation placed on it runs, mounting through its plugin.
func TestClientAgent_LosesServer_ReconnectsAndKeepsNode(t *testing.T) {
	e := newCSIEnv(t)
	f1, _ := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	e.addNode(t, "ctrl", hostdir.ModeController, e.leader)
	e.waitPlugin(t, 1, 1)
	w1 := e.nodeID("w1")
	e.waitSession(t, w1, f1, nil)
	cl := e.apis[e.leader.Name]
	e.register(t, cl, "v1", structs.AccessModeSingleNodeWriter)
	e.register(t, cl, "v2", structs.AccessModeSingleNodeWriter)
	e.place(t, cl, "a1", "w1", "v1")
	e.waitAlloc(t, cl, "a1", structs.AllocClientRunning, applyWait)

	// The server w1 is connected to goes away; the cluster keeps its quorum.
	f1.Stop()
	if l := e.c.WaitForLeader(electionWait); l != e.leader {
		t.Fatalf("leader after stopping a follower exp: %s got: %s", e.leader.Name, l.Name)
	}
	holder := e.waitSession(t, w1, nil, f1)
	if got := e.nodeID("w1"); got != w1 {
		t.Fatalf("node ID after reconnecting exp: %s got: %s", w1, got)
	}
	nodes, _, err := cl.Nodes(harness.Ctx(t, 10*time.Second), structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range nodes {
		if n.Name == "w1" {
			ids = append(ids, n.ID)
		}
	}
	if len(ids) != 1 || ids[0] != w1 {
		t.Fatalf("nodes named w1 exp: [%s] got: %v", w1, ids)
	}

	// Heartbeats continue through the new server: for longer than the TTL
	// plus grace (2 s + 1 s in tests) the node never turns down. Blocking
	// queries watch every change of the node, so a down in between is seen.
	deadline := time.Now().Add(4 * time.Second)
	var index uint64
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		n, meta, err := cl.Node(harness.Ctx(t, 30*time.Second), w1, structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: wait})
		if err != nil {
			t.Fatal(err)
		}
		if n.Status != structs.NodeStatusReady {
			t.Fatalf("node %s status after its server went away exp: %s got: %s", w1, structs.NodeStatusReady, n.Status)
		}
		index = meta.Index
	}
	if a, _, err := cl.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{}); err != nil || a.ClientStatus != structs.AllocClientRunning {
		t.Fatalf("alloc a1 after the failover exp: still running got: %+v %v", a, err)
	}
	if hs := e.c.NodeConnHolders(w1); len(hs) != 1 || hs[0] != holder {
		t.Fatalf("session holder after heartbeats exp: [%s] got: %v", holder.Name, serverNames(hs))
	}

	// A new allocation runs on the node, mounting through its plugin.
	e.place(t, cl, "a2", "w1", "v2")
	e.waitAlloc(t, cl, "a2", structs.AllocClientRunning, applyWait)
	audit := e.plugins["w1"].Audit()
	if n := csiCalls(audit, "NodePublishVolume", "ext-v2", "ext-w1", "ok", "/per-alloc/a2/"); n != 1 {
		t.Fatalf("NodePublish of v2 for a2 on w1 exp: 1 got: %d in %+v", n, audit)
	}
	if v := e.volume(t, cl, "v2"); v.WriteClaims["a2"] == nil || v.WriteClaims["a2"].NodeID != w1 {
		t.Fatalf("claim of v2 by a2 exp: on node %s got: %+v", w1, v.WriteClaims)
	}
}

// A node plugin that stops probing healthy makes claims on its node
// unschedulable: the plugin table shows the instance unhealthy, a claim
// gets the retryable unschedulable error, the agent keeps the allocation
// pending without claiming, and once the plugin is back the allocation
// runs by itself.
func TestClientCSI_UnhealthyNodePlugin_ClaimsUnschedulableUntilBack(t *testing.T) {
	e := newCSIEnv(t)
	f1, f2 := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	e.addNode(t, "ctrl", hostdir.ModeController, f2)
	e.waitPlugin(t, 1, 1)
	w1 := e.nodeID("w1")
	cl := e.apis[f2.Name]
	e.register(t, cl, "v1", structs.AccessModeSingleNodeWriter)

	e.plugins["w1"].Stop()
	e.waitPlugin(t, 0, 1)
	p, err := e.plugin(t, cl)
	if err != nil || p.Nodes[w1] == nil || p.Nodes[w1].Healthy {
		t.Fatalf("w1's node plugin instance exp: present, unhealthy got: %+v %v", p, err)
	}

	e.place(t, cl, "a1", "w1", "v1")
	_, err = cl.Claim(harness.Ctx(t, 30*time.Second), &structs.VolumeClaimRequest{
		VolumeID: "v1", AllocID: "a1", NodeID: w1, Mode: structs.ClaimModeWrite})
	checkCodedErr(t, "claim on a node whose plugin is unhealthy", err, structs.ErrUnschedulable, "no healthy node plugin", w1)

	// The agent keeps trying and being refused: the allocation stays
	// pending (watched by blocking query: any change wakes it) and the
	// volume gets no claim.
	a, meta, err := cl.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err = cl.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{MinQueryIndex: meta.Index, MaxQueryTime: 1500 * time.Millisecond})
	if err != nil || a.ClientStatus != structs.AllocClientPending {
		t.Fatalf("alloc a1 while its node plugin is unhealthy exp: pending got: %+v %v", a, err)
	}
	// And it says what it waits for (issue 30: it showed "-").
	harness.WaitFor(t, 30*time.Second, func() error {
		a, _, err := cl.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(a.ClientDescription, `waiting for volume "v1"`) || !strings.Contains(a.ClientDescription, "no healthy node plugin") {
			return fmt.Errorf("a1's description exp: waiting for v1, no healthy node plugin got: %q", a.ClientDescription)
		}
		return nil
	})
	if v := e.volume(t, cl, "v1"); v.HasClaims() {
		t.Fatalf("claims of v1 while the node plugin is unhealthy exp: none got: write=%v read=%v past=%v", v.WriteClaims, v.ReadClaims, v.PastClaims)
	}
	if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerPublishVolume", "", "", "", ""); n != 0 {
		t.Fatalf("ControllerPublish while unschedulable exp: 0 got: %d", n)
	}

	// The plugin comes back: the allocation runs without anyone's help.
	e.plugins["w1"].Start()
	e.waitPlugin(t, 1, 1)
	e.waitAlloc(t, cl, "a1", structs.AllocClientRunning, applyWait)
	if n := csiCalls(e.plugins["w1"].Audit(), "NodePublishVolume", "ext-v1", "ext-w1", "ok", "/per-alloc/a1/"); n != 1 {
		t.Fatalf("NodePublish of v1 for a1 after the plugin came back exp: 1 got: %d", n)
	}
}

// A controller publish that fails turns the new claim into a past claim, so
// the server-driven detach cleans up whatever the plugin half did; the
// agent retries the claim, which is new again and published again, and
// the allocation runs (docs/architecture.md, claim path).
func TestClientCSI_FailedControllerPublish_ReleasesClaimThenAllocRuns(t *testing.T) {
	e, cl := newWorkerAndController(t)
	e.register(t, cl, "v1", structs.AccessModeSingleNodeWriter)

	// The publish fails once; the clean-up's ControllerUnpublish takes a
	// while, as on real storage, so the agent's retry finds the claim still
	// being released.
	e.plugins["ctrl"].SetControl(hostdir.Control{Fail: map[string]int{"ControllerPublishVolume": 1},
		Delay: map[string]string{"ControllerUnpublishVolume": "1s"}})
	e.place(t, cl, "a1", "w1", "v1")
	e.waitAlloc(t, cl, "a1", structs.AllocClientRunning, applyWait)

	audit := e.plugins["ctrl"].Audit()
	if n := failedCalls(audit, "ControllerPublishVolume", "ext-v1"); n != 1 {
		t.Fatalf("failed ControllerPublish of v1 exp: 1 got: %d in %+v", n, audit)
	}
	if n := csiCalls(audit, "ControllerPublishVolume", "ext-v1", "ext-w1", "ok", ""); n != 1 {
		t.Fatalf("successful ControllerPublish of v1 exp: 1 got: %d in %+v", n, audit)
	}
	v := e.volume(t, cl, "v1")
	if c := v.WriteClaims["a1"]; c == nil || c.PublishContext[hostdir.PublishContextNode] != "ext-w1" || len(v.PastClaims) != 0 {
		t.Fatalf("v1 after the retried claim exp: live claim of a1 with publish context, no past claims got: write=%v past=%v", v.WriteClaims, v.PastClaims)
	}
}

// A client whose claim call is cut off while the leader is still running
// ControllerPublish retries the claim through another server; it must not
// stage or publish the volume before ControllerPublish finished (the CSI
// order, and the publish context the node needs comes from it).
func TestClientCSI_ClaimRetriedDuringControllerPublish_NodeStagesAfterPublish(t *testing.T) {
	e := newCSIEnv(t)
	f1, _ := e.followers(t)
	e.addNode(t, "w1", hostdir.ModeNode, f1)
	e.addNode(t, "ctrl", hostdir.ModeController, e.leader)
	e.waitPlugin(t, 1, 1)
	w1 := e.nodeID("w1")
	e.waitSession(t, w1, f1, nil)
	cl := e.apis[e.leader.Name]
	e.register(t, cl, "v1", structs.AccessModeSingleNodeWriter)

	// A slow controller: the claim is committed, its publish still running,
	// when the server the agent sent it through goes away.
	e.plugins["ctrl"].SetControl(hostdir.Control{Delay: map[string]string{"ControllerPublishVolume": "2s"}})
	e.place(t, cl, "a1", "w1", "v1")
	harness.WaitFor(t, applyWait, func() error {
		if v := e.volume(t, cl, "v1"); v.WriteClaims["a1"] == nil {
			return fmt.Errorf("claim of v1 by a1 exp: committed got: none")
		}
		return nil
	})
	f1.Stop()
	e.waitAlloc(t, cl, "a1", structs.AllocClientRunning, applyWait)

	var publishedAt time.Time
	harness.WaitFor(t, applyWait, func() error {
		for _, en := range e.plugins["ctrl"].Audit() {
			if en.Method == "ControllerPublishVolume" && en.Volume == "ext-v1" && en.Result == "ok" {
				publishedAt = en.Time
				return nil
			}
		}
		return fmt.Errorf("successful ControllerPublish of v1 exp: 1 got: none")
	})
	for _, en := range e.plugins["w1"].Audit() {
		if (en.Method == "NodeStageVolume" || en.Method == "NodePublishVolume") && en.Volume == "ext-v1" && !en.Time.After(publishedAt) {
			t.Fatalf("%s of v1 finished at %s exp: after ControllerPublish finished (%s) got: before",
				en.Method, en.Time.Format(time.RFC3339Nano), publishedAt.Format(time.RFC3339Nano))
		}
	}
	if c := e.volume(t, cl, "v1").WriteClaims["a1"]; c == nil || c.PublishContext[hostdir.PublishContextNode] != "ext-w1" {
		t.Fatalf("claim of v1 by a1 exp: publish context for ext-w1 got: %+v", c)
	}
}

// An attachment is per (volume, node). A reader placed on a node that
// already holds the volume read-write for a writer shares that attachment:
// no second ControllerPublish (which the plugin refuses as AlreadyExists,
// read-only flag differs: found by the chaos suite's mount runners, the
// reader's alloc used to fail). The attachment outlives the writer while
// the reader runs, and goes with the last claim on the node.
func TestClientCSI_ReaderOnANodeHoldingAWriterSharesItsAttachment(t *testing.T) {
	e, cl := newWorkerAndController(t)
	e.register(t, cl, "v1", structs.AccessModeMultiNodeMultiWriter)

	e.place(t, cl, "writer", "w1", "v1")
	e.waitAlloc(t, cl, "writer", structs.AllocClientRunning, applyWait)
	e.placeReader(t, cl, "reader", "w1", "v1")
	e.waitAlloc(t, cl, "reader", structs.AllocClientRunning, applyWait)

	audit := e.plugins["ctrl"].Audit()
	if n := csiCalls(audit, "ControllerPublishVolume", "ext-v1", "", "", ""); n != 1 {
		t.Fatalf("ControllerPublish of v1 exp: 1 (the writer's; the reader shares it) got: %d in %+v", n, audit)
	}
	v := e.volume(t, cl, "v1")
	if c := v.ReadClaims["reader"]; c == nil || !c.ControllerPublished || c.PublishContext[hostdir.PublishContextNode] != "ext-w1" {
		t.Fatalf("reader's claim exp: controller-published with the node's publish context got: %+v", c)
	}

	// The writer leaves: the reader still needs the attachment.
	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "writer"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, func() error {
		if v := e.volume(t, cl, "v1"); len(v.PastClaims) > 0 || v.WriteClaims["writer"] != nil {
			return fmt.Errorf("writer's claim exp: freed got: write=%v past=%v", v.WriteClaims, v.PastClaims)
		}
		return nil
	})
	if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerUnpublishVolume", "ext-v1", "", "", ""); n != 0 {
		t.Fatalf("ControllerUnpublish of v1 while the reader runs exp: 0 got: %d", n)
	}
	// The reader leaves: now the node's attachment goes.
	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "reader"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, func() error {
		if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerUnpublishVolume", "ext-v1", "ext-w1", "ok", ""); n != 1 {
			return fmt.Errorf("ControllerUnpublish of v1 from w1 exp: 1 got: %d", n)
		}
		if v := e.volume(t, cl, "v1"); v.HasClaims() {
			return fmt.Errorf("v1 exp: no claims got: %+v %+v", v.ReadClaims, v.PastClaims)
		}
		return nil
	})
}

// Chaos regression (S3/S4): the release of a past claim decided "no live
// claim on this node uses the volume", then waited for the plugin's
// controller lock; meanwhile a new claim on the same node was published
// (the plugin saw the node attached already) and staged, and the late
// ControllerUnpublish detached the volume under it. Publish and the
// release's check-and-unpublish of one (volume, node) now exclude each
// other, so the new claim's publish comes after the unpublish and the node
// ends attached.
func TestClientCSI_NewClaimDuringAReleaseWaitingForTheControllerEndsAttached(t *testing.T) {
	e, cl := newWorkerAndController(t)
	e.register(t, cl, "v1", structs.AccessModeMultiNodeMultiWriter)
	e.register(t, cl, "v2", structs.AccessModeMultiNodeMultiWriter)
	e.place(t, cl, "a1", "w1", "v1")
	e.place(t, cl, "b1", "w1", "v2")
	e.waitAlloc(t, cl, "a1", structs.AllocClientRunning, applyWait)
	e.waitAlloc(t, cl, "b1", structs.AllocClientRunning, applyWait)

	// v2's slow ControllerUnpublish holds the plugin's controller lock
	// while v1's release reaches its controller step.
	e.plugins["ctrl"].SetControl(hostdir.Control{Delay: map[string]string{"ControllerUnpublishVolume": "2s"}})
	nodeDetached := func(vol, alloc string) func() error {
		return func() error {
			if c := e.volume(t, cl, vol).PastClaims[alloc]; c == nil || c.State.Rank() < structs.ClaimStateNodeDetached.Rank() {
				return fmt.Errorf("%s's claim on %s exp: node-detached got: %+v", alloc, vol, c)
			}
			return nil
		}
	}
	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "b1"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, nodeDetached("v2", "b1"))
	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, nodeDetached("v1", "a1"))
	// Now a new alloc on the same node claims v1.
	e.place(t, cl, "a2", "w1", "v1")
	e.waitAlloc(t, cl, "a2", structs.AllocClientRunning, applyWait)
	harness.WaitFor(t, applyWait, func() error {
		if v := e.volume(t, cl, "v1"); len(v.PastClaims) > 0 {
			return fmt.Errorf("v1's past claims exp: freed got: %+v", v.PastClaims)
		}
		return nil
	})

	// The controller's last word on v1 at w1 is an attach: a2 runs on an
	// attached volume.
	last := ""
	for _, en := range e.plugins["ctrl"].Audit() {
		if en.Volume == "ext-v1" && en.Node == "ext-w1" && en.Result == "ok" &&
			(en.Method == "ControllerPublishVolume" || en.Method == "ControllerUnpublishVolume") {
			last = en.Method
		}
	}
	if last != "ControllerPublishVolume" {
		t.Fatalf("last controller call on v1 at w1 while a2 runs exp: ControllerPublishVolume got: %q", last)
	}
}

// The other order: a writer placed on a node that holds the volume
// read-only for a reader waits (retryable) instead of asking the
// controller for a read-write attachment the plugin would refuse; once the
// reader is gone and its attachment detached, the writer is published
// read-write and runs.
func TestClientCSI_WriterOnANodeAttachedReadOnlyWaitsForTheReader(t *testing.T) {
	e, cl := newWorkerAndController(t)
	e.register(t, cl, "v1", structs.AccessModeMultiNodeMultiWriter)

	e.placeReader(t, cl, "reader", "w1", "v1")
	e.waitAlloc(t, cl, "reader", structs.AllocClientRunning, applyWait)
	e.place(t, cl, "writer", "w1", "v1")
	// The writer's claim is taken and waits unpublished while the reader runs.
	harness.WaitFor(t, applyWait, func() error {
		if c := e.volume(t, cl, "v1").WriteClaims["writer"]; c == nil || c.ControllerPublished {
			return fmt.Errorf("writer's claim exp: taken, not published got: %+v", c)
		}
		return nil
	})
	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "reader"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, cl, "writer", structs.AllocClientRunning, applyWait)

	audit := e.plugins["ctrl"].Audit()
	if n := failedCalls(audit, "ControllerPublishVolume", "ext-v1"); n != 0 {
		t.Fatalf("failed ControllerPublish of v1 exp: 0 (the writer waited) got: %d in %+v", n, audit)
	}
	checkReattached(t, audit, "ext-v1")
	if c := e.volume(t, cl, "v1").WriteClaims["writer"]; c == nil || !c.ControllerPublished {
		t.Fatalf("writer's claim exp: published got: %+v", c)
	}
}

// Also when the read-only attachment belongs to a claim being released: a
// writer placed on the node while the reader's ControllerUnpublish keeps
// failing waits for it instead of being refused by the plugin.
func TestClientCSI_WriterWaitsForAReleasingReadersAttachment(t *testing.T) {
	e, cl := newWorkerAndController(t)
	e.register(t, cl, "v1", structs.AccessModeMultiNodeMultiWriter)
	e.placeReader(t, cl, "reader", "w1", "v1")
	e.waitAlloc(t, cl, "reader", structs.AllocClientRunning, applyWait)

	// The reader's release is stuck at the controller step: its read-only
	// attachment stays.
	e.plugins["ctrl"].SetControl(hostdir.Control{Fail: map[string]int{"ControllerUnpublishVolume": 1000}})
	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "reader"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, func() error {
		if n := failedCalls(e.plugins["ctrl"].Audit(), "ControllerUnpublishVolume", "ext-v1"); n == 0 {
			return fmt.Errorf("failed ControllerUnpublish of v1 exp: at least 1 got: 0")
		}
		return nil
	})
	e.place(t, cl, "writer", "w1", "v1")
	harness.WaitFor(t, applyWait, func() error {
		if c := e.volume(t, cl, "v1").WriteClaims["writer"]; c == nil || c.ControllerPublished {
			return fmt.Errorf("writer's claim exp: taken, waiting unpublished got: %+v", c)
		}
		return nil
	})
	if n := failedCalls(e.plugins["ctrl"].Audit(), "ControllerPublishVolume", "ext-v1"); n != 0 {
		t.Fatalf("failed ControllerPublish of v1 while the reader's attachment stays exp: 0 (the writer waits) got: %d", n)
	}
	// The controller recovers: the reader's attachment goes, the writer's comes.
	e.plugins["ctrl"].SetControl(hostdir.Control{})
	e.waitAlloc(t, cl, "writer", structs.AllocClientRunning, applyWait)
	checkReattached(t, e.plugins["ctrl"].Audit(), "ext-v1")
}

// checkReattached: the successful controller calls on vol were the first
// claim's attach, its detach, then the waiting claim's attach.
func checkReattached(t *testing.T, audit []hostdir.AuditEntry, vol string) {
	t.Helper()
	var order []string
	for _, en := range audit {
		if en.Volume == vol && en.Result == "ok" && strings.HasPrefix(en.Method, "Controller") {
			order = append(order, en.Method)
		}
	}
	exp := []string{"ControllerPublishVolume", "ControllerUnpublishVolume", "ControllerPublishVolume"}
	if fmt.Sprint(order) != fmt.Sprint(exp) {
		t.Fatalf("successful controller calls on %s exp: %v (attach, its detach, the waiting claim's attach) got: %v", vol, exp, order)
	}
}

// Chaos regression (S1): on a multi-node-single-writer volume a reader
// shared its node's read-write attachment with the writer; when the writer
// left, its claim was freed while the attachment stayed read-write for the
// reader, so a new writer on another node was admitted and the controller
// was asked to attach the volume read-write to a second node. The writer's
// claim now stays (and counts as the writer) until the readers sharing its
// attachment are gone; then the attachment is detached and it is freed.
func TestClientCSI_SingleWriterVolumeKeepsTheWriterWhileReadersShareItsAttachment(t *testing.T) {
	e, cl := newWorkerAndController(t)
	e.register(t, cl, "v1", structs.AccessModeMultiNodeSingleWriter)
	e.place(t, cl, "writer", "w1", "v1")
	e.waitAlloc(t, cl, "writer", structs.AllocClientRunning, applyWait)
	e.placeReader(t, cl, "reader", "w1", "v1")
	e.waitAlloc(t, cl, "reader", structs.AllocClientRunning, applyWait)

	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "writer"); err != nil {
		t.Fatal(err)
	}
	// The release waits for the reader, and says so.
	harness.WaitFor(t, applyWait, func() error {
		st, err := cl.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if s := st["v1"]; !strings.Contains(s.LastError, "shares this writer's read-write attachment") {
			return fmt.Errorf("release of v1 exp: waiting for the reader got: %+v", s)
		}
		return nil
	})
	v := e.volume(t, cl, "v1")
	if c := v.PastClaims["writer"]; c == nil {
		t.Fatalf("writer's claim while the reader shares its attachment exp: kept (past: it still counts as the writer) got: freed; claims %+v", v)
	}
	if _, err := cl.StopAllocs(harness.Ctx(t, 30*time.Second), "reader"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, func() error {
		if v := e.volume(t, cl, "v1"); v.HasClaims() {
			return fmt.Errorf("v1 exp: no claims got: write=%v read=%v past=%v", v.WriteClaims, v.ReadClaims, v.PastClaims)
		}
		return nil
	})
	if n := csiCalls(e.plugins["ctrl"].Audit(), "ControllerUnpublishVolume", "ext-v1", "ext-w1", "ok", ""); n == 0 {
		t.Fatal("ControllerUnpublish of v1 from w1 exp: at least 1 got: 0")
	}
}
