package endpoints

import (
	"context"
	"errors"
	"github.com/claimd/claimd/leaderlease"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Unit tests of the endpoints with fakes of the roles they use (Deps):
// the real state machine without Raft (fsmtest), and recorders for
// forwarding, session binding, heartbeats and attachments. No network,
// no cluster: each test says which server it pretends to be (leader or
// follower) and what connection the call came in on.

// fakeForwarder records what would have gone to the leader; it never
// forwards when this server leads.
type fakeForwarder struct {
	leader  *fakeCluster
	mu      sync.Mutex
	methods []string
	origins []structs.CallOrigin
}

func (f *fakeForwarder) Forward(method string, info structs.RPCInfo, args, reply any) (bool, error) {
	if f.leader.IsLeader() || info.IsForwarded() || (info.IsRead() && info.AllowStaleRead()) {
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.methods = append(f.methods, method)
	f.origins = append(f.origins, *info.CallOrigin())
	return true, nil
}

func (f *fakeForwarder) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.methods...)
}

// fakeCluster is this server's place: leader or follower, ACLs on or off.
type fakeCluster struct {
	leader, acl bool
	verifyErr   error // what VerifyLeader answers
	// features: every server has reported the entry features asked of
	// AllServersSupport.
	features bool
}

func (c *fakeCluster) IsLeader() bool                       { return c.leader }
func (c *fakeCluster) VerifyLeader() error                  { return c.verifyErr }
func (c *fakeCluster) LeaderContact() (bool, time.Duration) { return true, 0 }
func (c *fakeCluster) ServerAddrs() []string                { return []string{"127.0.0.1:4647"} }
func (c *fakeCluster) RaftMemberHost(string) bool           { return false }
func (c *fakeCluster) ServerName(string) string             { return "" }
func (c *fakeCluster) ServerVersion(string) string          { return "" }
func (c *fakeCluster) AllServersSupport(uint64) bool        { return c.features }
func (c *fakeCluster) Hello(*structs.HelloRequest) *structs.HelloResponse {
	return &structs.HelloResponse{}
}
func (c *fakeCluster) RaftHealth() (*structs.RaftHealthResponse, error) {
	return nil, structs.ErrNoLeader
}
func (c *fakeCluster) HeartbeatTTL() time.Duration { return 10 * time.Second }
func (c *fakeCluster) ACLEnabled() bool            { return c.acl }
func (c *fakeCluster) ACLResetIndex() uint64       { return 0 }
func (c *fakeCluster) ShutdownCh() <-chan struct{} { return nil }
func (c *fakeCluster) Raft() *raft.Raft            { return nil }

// localServer is the state machine as Reader and Writer.
type localServer struct{ *fsmtest.Local }

func (l localServer) WaitConsistentReads() error { return nil }
func (l localServer) BarrierPending() bool       { return false }
func (l localServer) SubmitClaim(req *structs.VolumeClaimRequest) (*structs.ClaimResult, uint64, error) {
	raw, index, err := l.Apply(structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{req}})
	if err != nil {
		return nil, index, err
	}
	return raw.(*structs.ClaimBatchResponse).Results[0], index, nil
}

type fakeSessions struct {
	mu    sync.Mutex
	bound map[string]*yamux.Session
}

func (s *fakeSessions) Bind(nodeID string, sess *yamux.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bound[nodeID] = sess
}
func (s *fakeSessions) HasConn(string) structs.NodeConnResponse { return structs.NodeConnResponse{} }

type fakeBeats struct{}

func (fakeBeats) Reset(string)               {}
func (fakeBeats) Received(string, time.Time) {}
func (fakeBeats) Remove(string)              {}

type fakeReleases struct{}

func (fakeReleases) Status() map[string]structs.ReleaseStatus { return nil }
func (fakeReleases) RunClaimGC(context.Context) (int, error)  { return 0, nil }
func (fakeReleases) RetryNode(string)                         {}

// fakeAttachments publishes every claim at once, with a context naming
// the node.
type fakeAttachments struct{}

func (fakeAttachments) Publish(c *structs.Claim, record func(map[string]string) error, _ func()) (*structs.Claim, error) {
	return nil, nil
}
func (fakeAttachments) ControllerCall(string, *structs.CSIControllerQuery, *structs.NodeRouting, any, any, func(string)) error {
	return nil
}
func (fakeAttachments) NodeDetach(*leaderlease.Grant, *structs.ClientCSINodeDetachRequest, *structs.ClientCSINodeDetachResponse) error {
	return nil
}
func (fakeAttachments) NodeExpand(*structs.ClientCSINodeExpandRequest, *structs.ClientCSINodeExpandResponse) error {
	return nil
}
func (fakeAttachments) NodeStats(*structs.ClientCSINodeStatsRequest, *structs.ClientCSINodeStatsResponse) error {
	return nil
}
func (fakeAttachments) NodeHeld(*structs.ClientCSINodeHeldRequest, *structs.ClientCSINodeHeldResponse) error {
	return nil
}

// world is one server's endpoints over a fresh state with ACLs on: a
// management token, a token granting node:write, nodes n1 and n2 (secrets
// s-n1, s-n2), volume v1 with a secret and allocation a1 on n1.
type world struct {
	t        *testing.T
	state    *fsmtest.Local
	cluster  *fakeCluster
	fwd      *fakeForwarder
	sessions *fakeSessions
	deps     *Deps
	mgmt     string
	nodeW    string
}

func newWorld(t *testing.T, leader bool) *world {
	t.Helper()
	l := fsmtest.New()
	cl := &fakeCluster{leader: leader, acl: true}
	w := &world{t: t, state: l, cluster: cl, fwd: &fakeForwarder{leader: cl}, sessions: &fakeSessions{bound: map[string]*yamux.Session{}},
		mgmt: structs.NewSecret(), nodeW: structs.NewSecret()}
	l.Must(t, structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{
		{Name: "node-write", Rules: `node { policy = "write" }`}}})
	l.Must(t, structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{
		{AccessorID: structs.NewSecret(), SecretID: w.mgmt, Name: "mgmt", Type: structs.ACLTokenManagement},
		{AccessorID: structs.NewSecret(), SecretID: w.nodeW, Name: "nw", Type: structs.ACLTokenClient, Policies: []string{"node-write"}},
	}})
	info := &structs.CSIInfo{PluginID: "p", Healthy: true, ExternalNodeID: "ext"}
	for _, id := range []string{"n1", "n2"} {
		l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{ID: id, SecretID: "s-" + id,
			Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{"p": info}}})
	}
	l.Must(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "v1", ExternalID: "e1",
		PluginID: "p", AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
		Secrets: structs.Secrets{"key": "s3cret"}}}})
	l.Must(t, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{{ID: "a1", NodeID: "n1",
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}}})
	srv := localServer{l}
	w.deps = &Deps{Forwarder: w.fwd, Writer: srv, Reader: srv, Cluster: cl, Sessions: w.sessions, Heartbeats: fakeBeats{},
		Releases: fakeReleases{}, Attachments: fakeAttachments{}, Tokens: NewTokenResolver(), Security: &SecurityCounters{},
		Logger: hclog.NewNullLogger()}
	return w
}

// conn is a connection with a certificate of role (and a yamux session,
// for the node calls that bind one).
func (w *world) conn(role tlsutil.Role) ConnInfo {
	a, b := net.Pipe()
	w.t.Cleanup(func() { a.Close(); b.Close() })
	sess, err := yamux.Server(a, yamux.DefaultConfig())
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { sess.Close() })
	return ConnInfo{Session: sess, TLS: role != "", Role: role, Remote: "127.0.0.9:1234", ServerTLS: true}
}

func (w *world) receivers(conn ConnInfo) map[string]any { return Receivers(w.deps, conn) }

func denied(err error) bool { return errors.Is(err, structs.ErrPermissionDenied) }

// A node:write token may mark a node down but not ready (issue 38), and
// only the node's own secret binds the node's session to the caller's
// connection.
func TestNodeUpdateStatus_OnlyTheNodesSecretBindsItsSession(t *testing.T) {
	w := newWorld(t, true)
	conn := w.conn(tlsutil.RoleClient)
	node := w.receivers(conn)["Node"].(*Node)
	var reply structs.NodeUpdateResponse
	if err := node.UpdateStatus(&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady,
		WriteRequest: structs.WriteRequest{AuthToken: w.nodeW}}, &reply); !denied(err) {
		t.Fatalf("ready heartbeat with node:write exp: permission_denied (only the node says it is ready) got: %v", err)
	}
	if err := node.UpdateStatus(&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown,
		WriteRequest: structs.WriteRequest{AuthToken: w.nodeW}}, &reply); err != nil {
		t.Fatalf("status down with node:write exp: allowed got: %v", err)
	}
	if _, ok := w.sessions.bound["n1"]; ok {
		t.Fatal("n1's session after a node:write token's status update exp: not bound got: bound to the caller")
	}
	if err := node.UpdateStatus(&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady,
		WriteRequest: structs.WriteRequest{AuthToken: "s-n2"}}, &reply); !denied(err) {
		t.Fatalf("status update of n1 with n2's secret exp: permission_denied got: %v", err)
	}
	if err := node.UpdateStatus(&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady,
		WriteRequest: structs.WriteRequest{AuthToken: "s-n1"}}, &reply); err != nil {
		t.Fatalf("heartbeat with n1's secret exp: allowed got: %v", err)
	}
	if s := w.sessions.bound["n1"]; s != conn.Session {
		t.Fatal("n1's session after its own heartbeat exp: the caller's got: not bound")
	}
}

// With ACLs off anyone may heartbeat any node, but the node's session still
// moves only for a caller that shows the node's own secret, on the leader
// and on a follower that forwards the heartbeat. (It used to move only
// when ACLs were on, so with them off an agent whose session moved to
// another server was called back on the old one until it registered
// again: a release after a leader's loss waited for that.)
func TestNodeUpdateStatus_ACLsOffOnlyTheNodesSecretBindsItsSession(t *testing.T) {
	for _, leader := range []bool{true, false} {
		w := newWorld(t, leader)
		w.cluster.acl = false
		conn := w.conn(tlsutil.RoleClient)
		node := w.receivers(conn)["Node"].(*Node)
		beat := func(token string) {
			t.Helper()
			var reply structs.NodeUpdateResponse
			if err := node.UpdateStatus(&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady,
				WriteRequest: structs.WriteRequest{AuthToken: token}}, &reply); err != nil {
				t.Fatalf("leader %v: heartbeat with ACLs off exp: allowed got: %v", leader, err)
			}
		}
		beat("")
		beat("s-n2")
		if _, ok := w.sessions.bound["n1"]; ok {
			t.Fatalf("leader %v: n1's session after heartbeats without its secret exp: not bound got: bound", leader)
		}
		beat("s-n1")
		if s := w.sessions.bound["n1"]; s != conn.Session {
			t.Fatalf("leader %v: n1's session after a heartbeat with its secret exp: the caller's got: not bound", leader)
		}
	}
}

// A heartbeat batch from a server brings nodes that were down back to
// ready, each heartbeat on its own node secret; one for a node that does
// not exist fails alone.
func TestNodeUpdateStatusBatch_BringsDownNodesBack(t *testing.T) {
	w := newWorld(t, true)
	w.state.Must(t, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown})
	w.state.Must(t, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n2", Status: structs.NodeStatusDown})
	node := w.receivers(w.conn(tlsutil.RoleServer))["Node"].(*Node)
	origin := structs.CallOrigin{TLS: true, Role: string(tlsutil.RoleClient)}
	args := &structs.NodeHeartbeatBatchRequest{}
	for _, id := range []string{"n1", "gone", "n2"} {
		hb := &structs.NodeUpdateStatusRequest{NodeID: id, Status: structs.NodeStatusReady}
		hb.AuthToken, hb.Forwarded, hb.Origin = "s-"+id, true, origin
		args.Heartbeats = append(args.Heartbeats, hb)
	}
	var reply structs.NodeHeartbeatBatchResponse
	if err := node.UpdateStatusBatch(args, &reply); err != nil {
		t.Fatalf("batch from a server exp: answered got: %v", err)
	}
	if len(reply.Results) != 3 || reply.Results[0].Error != "" || reply.Results[2].Error != "" || reply.Results[1].Error == "" {
		t.Fatalf("results exp: n1 and n2 served, the unknown node refused got: %+v", reply.Results)
	}
	for _, id := range []string{"n1", "n2"} {
		n, err := w.state.State().NodeByID(nil, id)
		if err != nil || n == nil || n.Status != structs.NodeStatusReady {
			t.Errorf("%s after its batched heartbeat exp: ready got: %+v, %v", id, n, err)
		}
	}
}

// On a follower, a call is decided where it entered: a client
// certificate's RaftJoin and a token without the capability are refused
// without forwarding; an allowed call goes to the leader carrying the
// identity of the connection it entered on, whatever the caller wrote.
func TestGate_FollowerDecidesBeforeForwarding(t *testing.T) {
	w := newWorld(t, false)
	conn := w.conn(tlsutil.RoleClient)
	recv := w.receivers(conn)
	op := recv["Operator"].(*Operator)
	if err := op.RaftJoin(&structs.RaftJoinRequest{Server: structs.ServerInfo{ID: "x", Addr: "127.0.0.1:1"}}, &structs.GenericResponse{}); !denied(err) {
		t.Fatalf("RaftJoin with a client certificate at a follower exp: permission_denied got: %v", err)
	}
	vol := recv["Volume"].(*Volume)
	reg := &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "v2"}}, WriteRequest: structs.WriteRequest{AuthToken: w.nodeW}}
	if err := vol.Register(reg, &structs.VolumeRegisterResponse{}); !denied(err) {
		t.Fatalf("volume register with node:write at a follower exp: permission_denied got: %v", err)
	}
	if got := w.fwd.sent(); len(got) != 0 {
		t.Fatalf("calls forwarded exp: none (refused where they entered) got: %v", got)
	}
	if n := w.deps.Security.ACLDenied.Load(); n != 2 {
		t.Errorf("refusals counted here exp: 2 got: %d", n)
	}
	reg.AuthToken = w.mgmt
	reg.Origin = structs.CallOrigin{TLS: true, Role: string(tlsutil.RoleServer)} // a lie
	if err := vol.Register(reg, &structs.VolumeRegisterResponse{}); err != nil {
		t.Fatalf("volume register with the management token at a follower exp: forwarded got: %v", err)
	}
	if got := w.fwd.origins; len(got) != 1 || got[0].Role != string(tlsutil.RoleClient) || !got[0].TLS {
		t.Fatalf("forwarded origin exp: the entry connection's (TLS, client) got: %+v", got)
	}
	// A token this follower has not applied is the leader's to decide.
	reg.AuthToken = structs.NewSecret()
	if err := vol.Register(reg, &structs.VolumeRegisterResponse{}); err != nil {
		t.Fatalf("unknown token at a follower exp: left to the leader (forwarded) got: %v", err)
	}
	if got := w.fwd.sent(); len(got) != 2 {
		t.Fatalf("calls forwarded exp: 2 got: %v", got)
	}
}

// The leader checks a forwarded call against the identity it entered
// with: a client certificate's RaftJoin forwarded by a follower is
// refused, and a "forwarded" call from a non-server certificate is
// refused outright.
func TestGate_LeaderChecksTheEntryIdentity(t *testing.T) {
	w := newWorld(t, true)
	fromServer := w.receivers(w.conn(tlsutil.RoleServer))["Operator"].(*Operator)
	join := &structs.RaftJoinRequest{Server: structs.ServerInfo{ID: "x", Addr: "127.0.0.1:1"}}
	join.Forwarded, join.Origin = true, structs.CallOrigin{TLS: true, Role: string(tlsutil.RoleClient)}
	if err := fromServer.RaftJoin(join, &structs.GenericResponse{}); !denied(err) {
		t.Fatalf("RaftJoin entered with a client certificate, forwarded by a server exp: permission_denied got: %v", err)
	}
	fromClient := w.receivers(w.conn(tlsutil.RoleClient))["Operator"].(*Operator)
	join.Origin.Role = string(tlsutil.RoleServer)
	if err := fromClient.RaftJoin(join, &structs.GenericResponse{}); !denied(err) {
		t.Fatalf("a 'forwarded' RaftJoin on a client certificate's connection exp: permission_denied got: %v", err)
	}
}

// A claim's reply carries the volume's secrets only for the node that
// holds the claim, authenticated by its secret; a token that may claim
// for it gets the claim without them.
func TestVolumeClaim_SecretsOnlyForTheClaimingNode(t *testing.T) {
	w := newWorld(t, true)
	vol := w.receivers(w.conn(tlsutil.RoleClient))["Volume"].(*Volume)
	var reply structs.VolumeClaimResponse
	req := &structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite,
		WriteRequest: structs.WriteRequest{AuthToken: w.mgmt}}
	if err := vol.Claim(req, &reply); err != nil {
		t.Fatalf("claim with the management token: %v", err)
	}
	if reply.Volume == nil || len(reply.Volume.Secrets) != 0 {
		t.Fatalf("claim reply to a token exp: the volume without secrets got: %+v", reply.Volume)
	}
	req.AuthToken = "s-n2"
	if err := vol.Claim(req, &reply); !denied(err) {
		t.Fatalf("claim for n1 with n2's secret exp: permission_denied got: %v", err)
	}
	req.AuthToken = "s-n1"
	reply = structs.VolumeClaimResponse{}
	if err := vol.Claim(req, &reply); err != nil {
		t.Fatalf("claim with n1's secret: %v", err)
	}
	if reply.Volume == nil || reply.Volume.Secrets["key"] != "s3cret" {
		t.Fatalf("claim reply to the claiming node exp: the volume's secrets got: %+v", reply.Volume)
	}
	if v, _ := w.state.State().VolumeByID(nil, "v1"); v.LiveClaim("a1") == nil {
		t.Fatal("claim exp: recorded got: none")
	}
}
