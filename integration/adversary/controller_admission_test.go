package adversary

import (
	"context"
	"crypto/tls"
	"fmt"
	netrpc "net/rpc"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// fakeController is the attacker of issue 38, finding 2: a brand-new node
// registered with a client certificate and no token, on its own yamux
// session, whose fingerprint says it runs a healthy controller of
// "hostdir" (another provider, fewer capabilities, an ID that sorts before
// every real node's). It answers every controller call with success, as
// a real controller would, and records what it was sent.
type fakeController struct {
	cl     *rpc.MuxClient
	nodeID string
	secret string

	mu      sync.Mutex
	calls   []string // method and volume
	secrets []string // every secret value a call carried
}

// The attacker's fingerprint: what it would make the plugin look like.
const (
	fakeProvider = "evil.example"
	fakeNodeID   = "0-attacker" // '-' sorts before every hex digit of an agent's ID
)

func fakeControllerInfo() *structs.CSIInfo {
	return &structs.CSIInfo{PluginID: "hostdir", Healthy: true, Provider: fakeProvider, ProviderVersion: "6.6.6",
		RequiresControllerPlugin: true,
		ControllerCapabilities:   &structs.CSIControllerCapabilities{PublishUnpublish: true}}
}

// startFakeController dials entry with the client certificate, registers
// the node (no token; the request forges every field that could ask for
// an admission), and heartbeats until the test ends.
func startFakeController(t *testing.T, c *harness.Cluster, entry *harness.TestServer) *fakeController {
	t.Helper()
	cfg := c.PKI().Configurator(t, tlsutil.RoleClient).OutgoingConfig()
	dial := rpc.TLSDialer(rpc.DefaultDialer, func() *tls.Config { return cfg }, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cl, err := rpc.DialMux(ctx, dial, entry.Addr, nil)
	cancel()
	if err != nil {
		t.Fatalf("attacker dial %s: %v", entry.Name, err)
	}
	f := &fakeController{cl: cl, nodeID: fakeNodeID, secret: structs.NewSecret()}
	t.Cleanup(func() { cl.Close() })
	go f.serve()

	node := &structs.Node{ID: f.nodeID, Name: f.nodeID, SecretID: f.secret, Status: structs.NodeStatusReady,
		CSIControllerPlugins: map[string]*structs.CSIInfo{"hostdir": fakeControllerInfo()},
		// A node instance that disagrees too: it may be a node of the
		// plugin, but not redefine it.
		// Its node capabilities say it can do nothing: sorting first, it
		// must not make usage or node expansion refused cluster-wide.
		CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true,
			Provider: fakeProvider, ProviderVersion: "6.6.6", ExternalNodeID: "ext-attacker",
			NodeCapabilities: &structs.CSINodeCapabilities{}}}}
	var reply structs.NodeUpdateResponse
	if err := f.call("Node.Register", &structs.NodeRegisterRequest{Node: node, ClientCertified: true,
		AutoAdmit:    structs.AdmittedByServerCert,
		WriteRequest: structs.WriteRequest{Origin: structs.CallOrigin{TLS: true, Role: string(tlsutil.RoleServer)}}}, &reply); err != nil {
		t.Fatalf("attacker registration with a client certificate and no token exp: accepted (any client certificate may add a node) got: %v", err)
	}
	hbCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() {
		every := reply.HeartbeatTTL / 3
		if every <= 0 {
			every = time.Second
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-tick.C:
			}
			var r structs.NodeUpdateResponse
			_ = f.call("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: f.nodeID, Status: structs.NodeStatusReady,
				WriteRequest: structs.WriteRequest{AuthToken: f.secret}}, &r)
		}
	}()
	return f
}

func (f *fakeController) call(method string, args, reply any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.cl.Call(ctx, method, args, reply)
}

// serve answers the servers' calls down the session.
func (f *fakeController) serve() {
	rs := netrpc.NewServer()
	_ = rs.RegisterName("ClientCSI", &fakeCSI{f: f})
	for {
		stream, err := f.cl.Session().AcceptStream()
		if err != nil {
			return
		}
		go rs.ServeCodec(rpc.NewServerCodec(stream, rpc.MaxRequestBytes))
	}
}

func (f *fakeController) record(method, volume string, secrets structs.Secrets) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method+" "+volume)
	for _, v := range secrets {
		f.secrets = append(f.secrets, v)
	}
}

func (f *fakeController) received() (calls, secrets []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), append([]string(nil), f.secrets...)
}

// fakeCSI is the attacker's ClientCSI service: success to everything.
type fakeCSI struct{ f *fakeController }

func (h *fakeCSI) ControllerAttachVolume(args *structs.ClientCSIControllerAttachRequest, reply *structs.ClientCSIControllerAttachResponse) error {
	h.f.record("ControllerAttachVolume", args.VolumeID, args.Secrets)
	reply.PublishContext = map[string]string{"attacker": "yes"}
	return nil
}

func (h *fakeCSI) ControllerDetachVolume(args *structs.ClientCSIControllerDetachRequest, reply *structs.ClientCSIControllerDetachResponse) error {
	h.f.record("ControllerDetachVolume", args.VolumeID, args.Secrets)
	return nil
}

// claimRound places one allocation per volume on node, waits until each
// has run (running: published through a controller, mounted by the real
// node plugin) when wantRunning, else until each has left pending, then
// stops them all and waits until every volume is free again.
func claimRound(t *testing.T, cl *api.Client, node, round string, vols []string, wantRunning bool) {
	t.Helper()
	ctx := harness.Ctx(t, 3*time.Minute)
	var allocs []*structs.Alloc
	var ids []string
	for _, v := range vols {
		id := round + "-" + v
		ids = append(ids, id)
		allocs = append(allocs, &structs.Alloc{ID: id, NodeID: node, Volumes: []*structs.AllocVolumeRequest{{VolumeID: v}}})
	}
	if _, err := cl.PlaceAllocs(ctx, allocs...); err != nil {
		t.Fatalf("round %s: place: %v", round, err)
	}
	harness.WaitFor(t, 90*time.Second, func() error {
		for _, id := range ids {
			a, _, err := cl.Alloc(ctx, id, structs.QueryOptions{})
			if err != nil {
				return err
			}
			if wantRunning && a.ClientStatus != structs.AllocClientRunning {
				return fmt.Errorf("round %s: alloc %s exp: running got: %s (%s)", round, id, a.ClientStatus, a.ClientDescription)
			}
			if !wantRunning && a.ClientStatus == structs.AllocClientPending {
				return fmt.Errorf("round %s: alloc %s exp: past pending got: pending", round, id)
			}
		}
		return nil
	})
	if _, err := cl.StopAllocs(ctx, ids...); err != nil {
		t.Fatalf("round %s: stop: %v", round, err)
	}
	harness.WaitFor(t, 90*time.Second, func() error {
		for _, v := range vols {
			got, _, err := cl.Volume(ctx, v, structs.QueryOptions{})
			if err != nil {
				return err
			}
			if got.HasClaims() {
				return fmt.Errorf("round %s: volume %s exp: freed got: claims %v", round, v, got.AllClaims())
			}
		}
		return nil
	})
}

// TestFinding38_2_SelfDeclaredControllerGetsNoCallNoSecret (issue 38,
// finding 2): on a secured cluster with a real worker and a real admitted
// hostdir controller, an attacker's node registered with a client
// certificate and no token advertises a healthy hostdir controller (its
// registration forging a server origin and an automatic admission). Across
// many claims and releases of volumes that carry secrets, it receives no
// call and no secret, and its fingerprint changes neither the plugin's
// provider nor its controller capabilities; the plugin shows it pending.
// Before issue 38 the servers picked among healthy controllers at random,
// so it received about half of 32 calls with their secrets, and sorting
// first it made the plugin its own. Neither its own session nor a
// plugin:read token can admit it; an operator's plugin:write token does,
// and then it is sent calls (the real controller revoked: every call), with
// the secrets; revoking it stops them again.
func TestFinding38_2_SelfDeclaredControllerGetsNoCallNoSecret(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	ctx := harness.Ctx(t, 5*time.Minute)
	f1 := c.Followers()[0]

	root := filepath.Join(t.TempDir(), "storage")
	wp := harness.StartPlugin(t, "w1", hostdir.ModeNode, root)
	cp := harness.StartPlugin(t, "ctrl", hostdir.ModeController, root)
	w1 := c.StartClient("w1", c.ServerOrder(f1), wp.Config())
	ctrl := c.StartClient("ctrl", c.ServerOrder(leader), cp.Config())
	ctrl.AdmitControllers()
	var before *structs.Plugin
	harness.WaitFor(t, applyWait, func() error {
		p, _, err := mgmt.Plugin(ctx, "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.NodesHealthy != 1 || p.ControllersHealthy != 1 || p.ControllerCapabilities == nil {
			return fmt.Errorf("plugin exp: 1 healthy node, 1 healthy admitted controller with capabilities got: %+v", p)
		}
		before = p
		return nil
	})
	if !before.ControllerCapabilities.CreateDeleteSnapshot || !before.ControllerCapabilities.ExpandVolume || before.Provider == fakeProvider {
		t.Fatalf("the real controller exp: snapshots and expansion, its own provider got: %+v", before)
	}

	// The attacker registers through a follower: the leader must judge it
	// by the client certificate it entered with, not by the follower's.
	fake := startFakeController(t, c, f1)
	harness.WaitFor(t, applyWait, func() error {
		p, _, err := mgmt.Plugin(ctx, "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		info := p.Controllers[fake.nodeID]
		if info == nil || !info.Healthy {
			return fmt.Errorf("attacker's controller exp: registered, healthy got: %+v", p.Controllers)
		}
		if p.ControllerAdmitted(fake.nodeID) || p.ControllersPending != 1 || p.ControllersHealthy != 1 ||
			!reflect.DeepEqual(p.PendingControllers(), []string{fake.nodeID}) {
			return fmt.Errorf("attacker's controller exp: pending, 1 healthy (the real one) got: pending %d healthy %d admissions %v",
				p.ControllersPending, p.ControllersHealthy, p.Admissions)
		}
		if p.Provider != before.Provider || p.ProviderVersion != before.ProviderVersion ||
			!reflect.DeepEqual(p.ControllerCapabilities, before.ControllerCapabilities) {
			return fmt.Errorf("plugin summary exp: the admitted controller's (%s %s %+v) got: %s %s %+v", before.Provider,
				before.ProviderVersion, before.ControllerCapabilities, p.Provider, p.ProviderVersion, p.ControllerCapabilities)
		}
		return nil
	})

	// Claims and releases of volumes with secrets: 16 publishes and 16
	// unpublishes, each through a controller.
	var vols []*structs.Volume
	var volIDs []string
	secretOf := map[string]string{}
	for i := range 8 {
		id := fmt.Sprintf("sv%d", i)
		secretOf[id] = "vol-secret-" + structs.NewSecret()[:12]
		volIDs = append(volIDs, id)
		vols = append(vols, &structs.Volume{ID: id, Name: id, ExternalID: "ext-" + id, PluginID: "hostdir",
			AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
			Secrets: structs.Secrets{"token": secretOf[id]}})
	}
	if _, err := mgmt.RegisterVolumes(ctx, vols...); err != nil {
		t.Fatal(err)
	}
	for _, round := range []string{"r1", "r2"} {
		claimRound(t, mgmt, w1.NodeID(), round, volIDs, true)
	}
	if calls, secrets := fake.received(); len(calls) != 0 || len(secrets) != 0 {
		t.Fatalf("pending attacker exp: no call, no secret got: calls %v, %d secrets", calls, len(secrets))
	}
	for _, v := range volIDs {
		if n := csiCalls(cp.Audit(), "ControllerPublishVolume", "ext-"+v); n != 2 {
			t.Errorf("ControllerPublish of %s on the real controller exp: 2 (one per round) got: %d", v, n)
		}
		if n := csiCalls(cp.Audit(), "ControllerUnpublishVolume", "ext-"+v); n != 2 {
			t.Errorf("ControllerUnpublish of %s on the real controller exp: 2 got: %d", v, n)
		}
	}
	// A node call is decided by the claim's own node, not by the plugin
	// summary the attacker's node instance could set: usage on w1 works.
	if _, err := mgmt.PlaceAllocs(ctx, &structs.Alloc{ID: "usage-sv0", NodeID: w1.NodeID(),
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "sv0"}}}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 90*time.Second, func() error {
		usage, err := mgmt.VolumeUsage(ctx, "sv0")
		if err != nil {
			return err
		}
		if len(usage) != 1 || usage[0].NodeID != w1.NodeID() || usage[0].Error != "" {
			return fmt.Errorf("usage of sv0 on w1 exp: w1's own plugin answers got: %+v", usage)
		}
		return nil
	})
	if _, err := mgmt.StopAllocs(ctx, "usage-sv0"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 90*time.Second, func() error {
		if got, _, err := mgmt.Volume(ctx, "sv0", structs.QueryOptions{}); err != nil || got.HasClaims() {
			return fmt.Errorf("sv0 exp: freed got: %v", err)
		}
		return nil
	})
	if p, _, err := mgmt.Plugin(ctx, "hostdir", structs.QueryOptions{}); err != nil || p.Provider != before.Provider ||
		!reflect.DeepEqual(p.ControllerCapabilities, before.ControllerCapabilities) {
		t.Fatalf("plugin summary after the rounds exp: unchanged got: %+v %v", p, err)
	}

	// Who may admit: not the attacker's own session (client certificate,
	// its node secret or no token), not a plugin:read token.
	if _, err := mgmt.ACLPolicyApply(ctx, "plugin-read", "", `plugin { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.ACLPolicyApply(ctx, "plugin-admin", "", `plugin { policy = "write" }`); err != nil {
		t.Fatal(err)
	}
	readTok, err := mgmt.ACLTokenCreate(ctx, "plugin-reader", "", []string{"plugin-read"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	adminTok, err := mgmt.ACLTokenCreate(ctx, "plugin-admin", "", []string{"plugin-admin"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitACLApplied(t, c)
	for _, token := range []string{"", fake.secret, readTok.SecretID} {
		var r structs.PluginAdmissionResponse
		err := fake.call("Plugin.AdmitController", &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: fake.nodeID,
			WriteRequest: structs.WriteRequest{AuthToken: token}}, &r)
		if !isDenied(err) {
			t.Fatalf("self-admission with token %q... exp: permission denied got: %v", token[:min(len(token), 4)], err)
		}
	}
	reader := f1.ClientWithToken(readTok.SecretID)
	if _, err := reader.AdmitController(ctx, "hostdir", fake.nodeID); !isDenied(err) {
		t.Fatalf("admission with plugin:read exp: permission denied got: %v", err)
	}

	// The operator admits it, and revokes the real controller: every
	// controller call now goes to the attacker's node, secrets and all.
	admin := f1.ClientWithToken(adminTok.SecretID)
	if _, err := admin.AdmitController(ctx, "hostdir", fake.nodeID); err != nil {
		t.Fatalf("admission with plugin:write exp: done got: %v", err)
	}
	if _, err := admin.RevokeController(ctx, "hostdir", ctrl.NodeID()); err != nil {
		t.Fatalf("revoke with plugin:write exp: done got: %v", err)
	}
	admitted := volIDs[:3]
	claimRound(t, mgmt, w1.NodeID(), "r3", admitted, false)
	calls, secrets := fake.received()
	for _, v := range admitted {
		if !slices.Contains(calls, "ControllerAttachVolume "+v) || !slices.Contains(secrets, secretOf[v]) {
			t.Fatalf("admitted attacker exp: ControllerAttachVolume of %s with its secret got: calls %v", v, calls)
		}
	}

	// Both revoked: a controller call fails, naming the pending
	// controllers and the command that admits them, and reaches no one.
	if _, err := admin.RevokeController(ctx, "hostdir", fake.nodeID); err != nil {
		t.Fatalf("revoke of the attacker exp: done got: %v", err)
	}
	harness.WaitFor(t, applyWait, func() error {
		_, err := mgmt.VolumeStorage(ctx, volIDs[0])
		if err == nil || !strings.Contains(err.Error(), "pending admission") || !strings.Contains(err.Error(), fake.nodeID) ||
			!strings.Contains(err.Error(), "claimd plugin admit hostdir") {
			return fmt.Errorf("controller call with only pending controllers exp: an error naming them and the admit command got: %v", err)
		}
		return nil
	})
	// The real controller admitted again: the attacker gets nothing more.
	if _, err := admin.AdmitController(ctx, "hostdir", ctrl.NodeID()); err != nil {
		t.Fatal(err)
	}
	calls, _ = fake.received()
	claimRound(t, mgmt, w1.NodeID(), "r4", volIDs[3:], true)
	if after, _ := fake.received(); len(after) != len(calls) {
		t.Fatalf("revoked attacker exp: no further call got: %v", after[len(calls):])
	}
	for _, v := range volIDs[3:] {
		if n := csiCalls(cp.Audit(), "ControllerPublishVolume", "ext-"+v); n != 3 {
			t.Errorf("ControllerPublish of %s on the real controller exp: 3 (rounds 1, 2 and 4) got: %d", v, n)
		}
	}
}
