package adversary

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Issue 38, finding 1: a node's identity is its own for good. Each test
// starts three servers (mutual TLS, ACLs) and three real client agents
// with hostdir plugins on one storage root: B holds a single-node-writer
// claim on v1, C is the second writer that must not get it while B may
// still have it mounted, and ctrl runs the controller.

// identityWorld is that cluster.
type identityWorld struct {
	c              *harness.Cluster
	leader         *harness.TestServer
	f1             *harness.TestServer
	mgmt           *api.Client
	b, cNode       *harness.TestClient
	bID, cID       string
	bPlug, cPlug   *harness.TestPlugin
	ctrlPlug       *harness.TestPlugin
	nodeWriteToken string
}

func newIdentityWorld(t *testing.T) *identityWorld {
	t.Helper()
	return newIdentityWorldWith(t, structs.NodeLostWait, 0)
}

// newIdentityWorldWith: v1 follows policy, and every agent holds lease
// (0: none).
func newIdentityWorldWith(t *testing.T, policy structs.NodeLostPolicy, lease time.Duration) *identityWorld {
	t.Helper()
	c := harness.NewCluster(t, 3, harness.Options{ConfigureClient: func(cfg *client.Config) { cfg.NodeLease = lease }})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	w := &identityWorld{c: c, leader: leader, f1: c.Followers()[0], mgmt: leader.Client()}
	ctx := harness.Ctx(t, time.Minute)

	root := filepath.Join(t.TempDir(), "storage")
	w.bPlug = harness.StartPlugin(t, "b", hostdir.ModeNode, root)
	w.cPlug = harness.StartPlugin(t, "c", hostdir.ModeNode, root)
	w.ctrlPlug = harness.StartPlugin(t, "ctrl", hostdir.ModeController, root)
	w.b = c.StartClient("b", c.ServerOrder(w.f1), w.bPlug.Config())
	w.cNode = c.StartClient("c", c.ServerOrder(w.f1), w.cPlug.Config())
	c.StartClient("ctrl", c.ServerOrder(w.f1), w.ctrlPlug.Config()).AdmitControllers()
	w.bID, w.cID = w.b.NodeID(), w.cNode.NodeID()
	harness.WaitFor(t, applyWait, func() error {
		p, _, err := w.mgmt.Plugin(ctx, "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.NodesHealthy != 2 || p.ControllersHealthy != 1 {
			return fmt.Errorf("plugin exp: 2 healthy nodes, 1 healthy controller got: %d, %d", p.NodesHealthy, p.ControllersHealthy)
		}
		return nil
	})

	if _, err := w.mgmt.ACLPolicyApply(ctx, "node-write", "", `node { policy = "write" }`); err != nil {
		t.Fatal(err)
	}
	tok, err := w.mgmt.ACLTokenCreate(ctx, "node-writer", "", []string{"node-write"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.nodeWriteToken = tok.SecretID
	waitACLApplied(t, c)

	// B writes to v1.
	vol := &structs.Volume{ID: "v1", Name: "v1", ExternalID: "ext-v1", PluginID: "hostdir",
		AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem, NodeLost: policy}
	if _, err := w.mgmt.RegisterVolumes(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if _, err := w.mgmt.PlaceAllocs(ctx, &structs.Alloc{ID: "a1", NodeID: w.bID, Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
		t.Fatal(err)
	}
	w.waitAlloc(t, "a1", structs.AllocClientRunning)
	if n := csiCalls(w.bPlug.Audit(), "NodePublishVolume", "ext-v1"); n != 1 {
		t.Fatalf("v1 on B exp: published once got: %d", n)
	}
	return w
}

func (w *identityWorld) waitAlloc(t *testing.T, id string, want structs.AllocClientStatus) {
	t.Helper()
	harness.WaitFor(t, applyWait, func() error {
		a, _, err := w.mgmt.Alloc(harness.Ctx(t, 10*time.Second), id, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != want {
			return fmt.Errorf("alloc %s exp: %s got: %s (%s)", id, want, a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
}

// impostor is a registration of id with the attacker's own secret and a
// hostdir fingerprint like a real node's.
func impostor(id, token string) *structs.NodeRegisterRequest {
	return &structs.NodeRegisterRequest{Node: &structs.Node{ID: id, Name: "impostor", SecretID: "attacker-" + structs.NewSecret()[:8],
		Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{
			"hostdir": {PluginID: "hostdir", Healthy: true, ExternalNodeID: id}}},
		WriteRequest: structs.WriteRequest{AuthToken: token}}
}

// releaseTries waits until the leader has tried v1's release at least
// past+n times and failed the last time for the reason want says, and
// returns the count: enough passes that a wrongful release would have
// happened.
func (w *identityWorld) releaseTries(t *testing.T, past, n int, want ...string) int {
	t.Helper()
	var st structs.ReleaseStatus
	harness.WaitFor(t, applyWait, func() error {
		all, err := w.mgmt.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		st = all["v1"]
		if st.Attempts < past {
			// A new leader counts its own attempts from zero.
			past = 0
		}
		if st.Attempts < past+n {
			return fmt.Errorf("v1 release attempts exp: ≥%d got: %d (%s)", past+n, st.Attempts, st.LastError)
		}
		for _, w := range want {
			if !strings.Contains(st.LastError, w) {
				return fmt.Errorf("v1 release's last error exp: says %q got: %q", w, st.LastError)
			}
		}
		return nil
	})
	return st.Attempts
}

// stillHeldByB checks that B's claim on v1 is past but not freed, and
// that v1 reached no other node: no second controller publish, nothing
// staged or published on C.
func (w *identityWorld) stillHeldByB(t *testing.T, when string) {
	t.Helper()
	v, _, err := w.mgmt.Volume(harness.Ctx(t, 10*time.Second), "v1", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := v.PastClaims["a1"]
	if c == nil || c.NodeID != w.bID || c.State.Rank() >= structs.ClaimStateNodeDetached.Rank() || len(v.WriteClaims) != 0 {
		t.Fatalf("%s: v1 exp: B's claim past and not node-detached, no other writer got: past %v, write %v", when, v.PastClaims, v.WriteClaims)
	}
	if n := csiCalls(w.ctrlPlug.Audit(), "ControllerPublishVolume", "ext-v1"); n != 1 {
		t.Fatalf("%s: controller publishes of v1 exp: 1 (to B) got: %d", when, n)
	}
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume"} {
		if n := csiCalls(w.cPlug.Audit(), m, "ext-v1"); n != 0 {
			t.Fatalf("%s: %s of v1 on C exp: none (B may still write) got: %d", when, m, n)
		}
	}
}

// (a) The takeover itself: with a node:write token, deregister B and at
// once register "a new node" with B's ID, the attacker's secret and a
// session the attacker keeps. B's agent is alive and cannot unmount (its
// plugin fails NodeUnpublish: the volume is busy). The registration is
// refused with and without the token; B comes back on its own secret and
// its session stays its own; no node detach reaches the attacker, so B's
// claim is not freed and v1 is not published to C. Once B can unmount,
// B's own release frees v1 and C gets it.
func TestIdentity_NodeWriteTokenCannotTakeOverADeregisteredNodesID(t *testing.T) {
	w := newIdentityWorld(t)
	w.bPlug.SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1 << 20}, FailMessage: map[string]string{"NodeUnpublishVolume": "volume busy"}})
	a := mustDialAs(t, w.c, w.leader.Addr, tlsutil.RoleClient)

	if err := a.call("Node.Deregister", &structs.NodeDeregisterRequest{NodeIDs: []string{w.bID},
		WriteRequest: structs.WriteRequest{AuthToken: w.nodeWriteToken}}, &structs.GenericResponse{}); err != nil {
		t.Fatalf("deregister B with node:write exp: allowed (an operator's right) got: %v", err)
	}
	for _, token := range []string{w.nodeWriteToken, ""} {
		err := a.call("Node.Register", impostor(w.bID, token), &structs.NodeUpdateResponse{})
		if !isDenied(err) {
			t.Fatalf("register B's ID with another secret (token %v) right after its deregistration exp: permission_denied got: %v", token != "", err)
		}
	}
	// The second writer wants v1.
	if _, err := w.mgmt.PlaceAllocs(harness.Ctx(t, time.Minute), &structs.Alloc{ID: "a2", NodeID: w.cID,
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
		t.Fatal(err)
	}
	// B's agent notices and registers again with its own secret.
	harness.WaitFor(t, applyWait, func() error {
		n, _, err := w.mgmt.Node(harness.Ctx(t, 10*time.Second), w.bID, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.Name != "b" || n.Status != structs.NodeStatusReady {
			return fmt.Errorf("node B exp: B's agent's, ready got: %s, %s", n.Name, n.Status)
		}
		return nil
	})
	// The release goes to B, whose unmount fails: tried again and again.
	tries := w.releaseTries(t, 0, 1, "volume busy")
	tries = w.releaseTries(t, tries, 3, "volume busy")
	if hs := w.c.NodeConnHolders(w.bID); len(hs) != 1 || hs[0] != w.f1 {
		t.Fatalf("B's session exp: only on %s (B's agent's) got: %d holders", w.f1.Name, len(hs))
	}
	if got := a.calls(); len(got) != 0 {
		t.Fatalf("attacker's session exp: no calls meant for B got: %v", got)
	}
	w.stillHeldByB(t, fmt.Sprintf("after %d release attempts", tries))
	if n := csiCalls(w.bPlug.Audit(), "NodeUnpublishVolume", "ext-v1"); n != 0 {
		t.Fatalf("NodeUnpublish of v1 on B exp: none succeeded (busy) got: %d", n)
	}

	// B can unmount now: its own release frees v1, and C gets it.
	w.bPlug.SetControl(hostdir.Control{})
	w.waitAlloc(t, "a2", structs.AllocClientRunning)
	if n := csiCalls(w.bPlug.Audit(), "NodeUnpublishVolume", "ext-v1"); n != 1 {
		t.Fatalf("NodeUnpublish of v1 on B before C got it exp: 1 got: %d", n)
	}
	if n := csiCalls(w.cPlug.Audit(), "NodePublishVolume", "ext-v1"); n != 1 {
		t.Fatalf("v1 on C exp: published once got: %d", n)
	}
}

// (b) and (c): B is gone (its agent stopped, v1 still mounted there) and
// an operator deregistered it, so B's release waits for -force. A client
// certificate without a token cannot register B's ID with another secret.
// After an operator's purge it can, as a new node: and still no node
// detach reaches it, B's claim keeps waiting for -force, and v1 goes to C
// only once the operator forces it.
func TestIdentity_DeregisteredNodesIDNeedsItsSecretAndPurgeHandsOverNoClaims(t *testing.T) {
	w := newIdentityWorld(t)
	ctx := harness.Ctx(t, 2*time.Minute)
	w.b.Stop()
	// `claimd node deregister`, as an operator runs it (node:write is
	// enough; the management token is what the operator has here).
	env := []string{"CLAIMD_ADDR=" + w.leader.Addr, "CLAIMD_TOKEN=" + w.c.ManagementToken(),
		"CLAIMD_CACERT=" + w.c.PKI().CAFile, "CLAIMD_CLIENT_CERT=" + w.c.PKI().CertFile[tlsutil.RoleCLI],
		"CLAIMD_CLIENT_KEY=" + w.c.PKI().KeyFile[tlsutil.RoleCLI]}
	if r := harness.RunCLIEnv(t, env, "node", "deregister", w.bID); r.Code != 0 ||
		!strings.Contains(r.Stdout, "claimd volume detach -force VOLUME "+w.bID) || !strings.Contains(r.Stdout, "claimd node purge "+w.bID) {
		t.Fatalf("node deregister of B exp: done, naming -force and purge got: %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	if _, err := w.mgmt.PlaceAllocs(ctx, &structs.Alloc{ID: "a2", NodeID: w.cID,
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
		t.Fatal(err)
	}
	a := mustDialAs(t, w.c, w.leader.Addr, tlsutil.RoleClient)
	f := mustDialAs(t, w.c, w.f1.Addr, tlsutil.RoleClient)
	for _, entry := range []*attacker{a, f} {
		if err := entry.call("Node.Register", impostor(w.bID, ""), &structs.NodeUpdateResponse{}); !isDenied(err) {
			t.Fatalf("register deregistered B's ID with a client certificate and another secret exp: permission_denied got: %v", err)
		}
	}
	tries := w.releaseTries(t, 0, 3, "deregistered", "-force")
	w.stillHeldByB(t, "after the refused registrations")

	// The operator purges B's ID. Only a management token may.
	nwClient := w.leader.ClientWithToken(w.nodeWriteToken)
	if _, err := nwClient.PurgeNode(ctx, w.bID); !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("purge with node:write exp: permission_denied got: %v", err)
	}
	// `claimd node purge`, as an operator runs it (management token).
	if r := harness.RunCLIEnv(t, env, "node", "purge", w.cID); r.Code == 0 || !strings.Contains(r.Stderr, "deregister it first") {
		t.Fatalf("node purge of registered C exp: refused, deregister it first got: %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	r := harness.RunCLIEnv(t, env, "node", "purge", w.bID)
	if r.Code != 0 || !strings.Contains(r.Stdout, "claim still held: v1/a1") ||
		!strings.Contains(r.Stdout, "waiting for `claimd volume detach -force VOLUME "+w.bID+"`") || !strings.Contains(r.Stdout, "never releases them") {
		t.Fatalf("node purge of deregistered B exp: done, v1/a1 still held and waiting for -force, never released by a newcomer got: %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Logf("claimd node purge %s:\n%s", w.bID, r.Stdout)
	// Every server has applied the purge (a server that has not yet still
	// refuses the ID where the call enters, as it would for a node it
	// still has registered: the caller retries).
	harness.WaitFor(t, applyWait, func() error {
		for _, s := range w.c.Servers {
			if id, err := s.Server().State().NodeIdentity(nil, w.bID); err != nil || id != nil {
				return fmt.Errorf("%s: B's reservation exp: purged got: %+v %v", s.Name, id, err)
			}
		}
		return nil
	})
	// A new node may take the ID now: the attacker, on its own session.
	if err := a.call("Node.Register", impostor(w.bID, ""), &structs.NodeUpdateResponse{}); err != nil {
		t.Fatalf("register the purged ID with a client certificate exp: allowed (a new node) got: %v", err)
	}
	tries = w.releaseTries(t, tries, 3, "purged", "-force")
	if got := a.calls(); len(got) != 0 {
		t.Fatalf("newcomer's session exp: no calls for B's claims got: %v", got)
	}
	w.stillHeldByB(t, fmt.Sprintf("with a newcomer on B's ID, after %d release attempts", tries))

	// The way out the purge named: the operator forces it.
	if _, err := w.mgmt.DetachVolume(ctx, "v1", w.bID, true); err != nil {
		t.Fatalf("volume detach -force exp: done got: %v", err)
	}
	w.waitAlloc(t, "a2", structs.AllocClientRunning)
	if got := a.calls(); len(got) != 0 {
		t.Fatalf("newcomer's session after the forced release exp: no calls got: %v", got)
	}
}

// What node:write may still do to a live node: mark it down, which stops
// every allocation on it at once. Under either policy that makes no second
// writer. B keeps heartbeating on its own secret (the token may not mark
// it ready), so under node_lost fence its lease, counted from B's own last
// heartbeat, never runs out, and under wait the release waits for B. The
// attacker marks B down again and again for twice the time a lease takes
// to run out on the leader, while B cannot unmount and C wants v1: v1
// stays B's, nothing is fenced, nothing reaches the attacker. Once B can
// unmount, its own release frees v1.
func TestIdentity_NodeWriteTokenMarkingALiveNodeDownMakesNoSecondWriter(t *testing.T) {
	for _, policy := range []structs.NodeLostPolicy{structs.NodeLostWait, structs.NodeLostFence} {
		t.Run(string(policy), func(t *testing.T) {
			lease := structs.MinNodeLease
			w := newIdentityWorldWith(t, policy, lease)
			w.bPlug.SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1 << 20}, FailMessage: map[string]string{"NodeUnpublishVolume": "volume busy"}})
			if _, err := w.mgmt.PlaceAllocs(harness.Ctx(t, time.Minute), &structs.Alloc{ID: "a2", NodeID: w.cID,
				Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
				t.Fatal(err)
			}
			a := mustDialAs(t, w.c, w.leader.Addr, tlsutil.RoleClient)
			status := func(s structs.NodeStatus) error {
				return a.call("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: w.bID, Status: s,
					WriteRequest: structs.WriteRequest{AuthToken: w.nodeWriteToken}}, &structs.NodeUpdateResponse{})
			}
			if err := status(structs.NodeStatusReady); !isDenied(err) {
				t.Fatalf("ready for B with node:write exp: permission_denied got: %v", err)
			}
			end := time.Now().Add(2 * structs.LeaseExpiry(lease))
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			// What the release waited on while B was down: the watcher
			// must have seen B down, or the test proves nothing.
			waitsOnDown := map[structs.NodeLostPolicy]string{
				structs.NodeLostWait:  "waiting for it to come back",
				structs.NodeLostFence: "its lease runs out",
			}[policy]
			downs, sawDown := 0, false
			for time.Now().Before(end) {
				if err := status(structs.NodeStatusDown); err != nil {
					t.Fatalf("B marked down with node:write exp: allowed got: %v", err)
				}
				downs++
				if st, err := w.mgmt.ReleaseStatus(harness.Ctx(t, 10*time.Second)); err == nil && strings.Contains(st["v1"].LastError, waitsOnDown) {
					sawDown = true
				}
				<-tick.C
			}
			if !sawDown {
				t.Fatalf("v1's release while B was marked down exp: once waited with %q got: never", waitsOnDown)
			}
			a1, _, err := w.mgmt.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{})
			if err != nil || a1.ClientStatus != structs.AllocClientLost {
				t.Fatalf("B's alloc after it was marked down exp: lost got: %+v %v", a1, err)
			}
			w.stillHeldByB(t, fmt.Sprintf("after %d downs over %s", downs, 2*structs.LeaseExpiry(lease)))
			v, _, _ := w.mgmt.Volume(harness.Ctx(t, 10*time.Second), "v1", structs.QueryOptions{})
			if c := v.PastClaims["a1"]; c.Fenced || c.NodeDetachSkipped {
				t.Fatalf("B's claim exp: not fenced (B kept its lease) got: %+v", c)
			}
			if got := a.calls(); len(got) != 0 {
				t.Fatalf("attacker's session exp: no calls got: %v", got)
			}
			w.bPlug.SetControl(hostdir.Control{})
			w.waitAlloc(t, "a2", structs.AllocClientRunning)
			if n := csiCalls(w.bPlug.Audit(), "NodeUnpublishVolume", "ext-v1"); n != 1 {
				t.Fatalf("NodeUnpublish of v1 on B before C got it exp: 1 got: %d", n)
			}
		})
	}
}
