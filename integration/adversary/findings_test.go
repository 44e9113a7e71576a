package adversary

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// raftServers is the Raft configuration as (ID, address) pairs.
func raftServers(t *testing.T, cl *api.Client) []structs.RaftServer {
	t.Helper()
	var reply structs.RaftConfigurationResponse
	if err := cl.Call(harness.Ctx(t, 10*time.Second), "Operator.RaftGetConfiguration", &structs.GenericRequest{}, &reply); err != nil {
		t.Fatalf("raft configuration: %v", err)
	}
	out := reply.Servers
	for i := range out {
		out[i].Leader = false // who leads is not what these tests compare
	}
	return out
}

// TestFinding1_RaftJoinThroughFollowerNeedsServerCertificate: a client or
// cli certificate without a token cannot change the membership by asking
// a follower (which used to forward the call, and the leader checked the
// follower's server certificate instead of the caller's). Pointing the
// existing servers at dead addresses that way left the cluster without a
// leader. Refused at the follower, at the leader, and with a forged
// "forwarded" flag; the configuration does not change.
func TestFinding1_RaftJoinThroughFollowerNeedsServerCertificate(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	before := raftServers(t, mgmt)
	follower := c.Followers()[0]
	for _, role := range []tlsutil.Role{tlsutil.RoleClient, tlsutil.RoleCLI} {
		for _, entry := range []*harness.TestServer{follower, leader} {
			a := mustDialAs(t, c, entry.Addr, role)
			for _, target := range before {
				for _, forged := range []bool{false, true} {
					args := &structs.RaftJoinRequest{Server: structs.ServerInfo{ID: target.ID, Name: "evil", Addr: deadAddr(t)}}
					args.Forwarded = forged
					err := a.call("Operator.RaftJoin", args, &structs.GenericResponse{})
					if !isDenied(err) {
						t.Errorf("RaftJoin of %s at a dead address with a %s certificate, no token, at %s (forged forwarded: %v) exp: permission_denied got: %v",
							target.ID, role, entry.Name, forged, err)
					}
				}
			}
		}
	}
	if after := raftServers(t, mgmt); !reflect.DeepEqual(after, before) {
		t.Fatalf("raft configuration after refused joins exp: %+v got: %+v", before, after)
	}
	if l := c.Leader(); l != leader {
		t.Fatalf("leader after refused joins exp: %s got: %v", leader.Name, l)
	}
}

// csiCalls counts a plugin's audit entries of method on vol.
func csiCalls(entries []hostdir.AuditEntry, method, vol string) int {
	n := 0
	for _, en := range entries {
		if en.Method == method && en.Volume == vol && en.Result == "ok" {
			n++
		}
	}
	return n
}

// TestFinding2_NodeWriteTokenCannotMoveANodesSession: a token that grants
// node:write may not heartbeat for a node (issue 38), and the session the
// servers call the node on stays the node's own: neither the controller publish (with
// the volume's secrets) nor the node detach of a release reaches the
// attacker's session, which would answer "done" without unmounting and
// let the servers publish the volume to another writer.
func TestFinding2_NodeWriteTokenCannotMoveANodesSession(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	ctx := harness.Ctx(t, 2*time.Minute)
	f1, f2 := c.Followers()[0], c.Followers()[1]

	root := filepath.Join(t.TempDir(), "storage")
	wp := harness.StartPlugin(t, "w1", hostdir.ModeNode, root)
	cp := harness.StartPlugin(t, "ctrl", hostdir.ModeController, root)
	w1 := c.StartClient("w1", c.ServerOrder(f1), wp.Config())
	ctrl := c.StartClient("ctrl", c.ServerOrder(f1), cp.Config())
	ctrl.AdmitControllers()
	harness.WaitFor(t, applyWait, func() error {
		p, _, err := mgmt.Plugin(ctx, "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.NodesHealthy != 1 || p.ControllersHealthy != 1 {
			return fmt.Errorf("plugin exp: 1 healthy node, 1 healthy controller got: %+v", p)
		}
		return nil
	})
	victims := []string{w1.NodeID(), ctrl.NodeID()}
	for _, id := range victims {
		harness.WaitFor(t, applyWait, func() error {
			if hs := c.NodeConnHolders(id); len(hs) != 1 || hs[0] != f1 {
				return fmt.Errorf("node %s's session exp: on %s got: %d holders", id, f1.Name, len(hs))
			}
			return nil
		})
	}

	if _, err := mgmt.ACLPolicyApply(ctx, "node-write", "", `node { policy = "write" }`); err != nil {
		t.Fatal(err)
	}
	nw, err := mgmt.ACLTokenCreate(ctx, "node-writer", "", []string{"node-write"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitACLApplied(t, c)
	// The attacker heartbeats for both victims, with a client certificate
	// and the node:write token, entering on the leader and on the other
	// follower (a newer session than the agents' would win the routing).
	var attackers []*attacker
	for _, entry := range []*harness.TestServer{leader, f2} {
		a := mustDialAs(t, c, entry.Addr, tlsutil.RoleClient)
		attackers = append(attackers, a)
		for _, id := range victims {
			var reply structs.NodeUpdateResponse
			err := a.call("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: id, Status: structs.NodeStatusReady,
				WriteRequest: structs.WriteRequest{AuthToken: nw.SecretID}}, &reply)
			if !isDenied(err) {
				// Since issue 38 only the node's own secret marks it
				// ready; the session must not move either way.
				t.Fatalf("ready heartbeat for %s with node:write at %s exp: permission_denied got: %v", id, entry.Name, err)
			}
		}
	}
	for _, id := range victims {
		if hs := c.NodeConnHolders(id); len(hs) != 1 || hs[0] != f1 {
			t.Fatalf("node %s's session after the attacker's heartbeats exp: only on %s (the agent's) got: %d holders", id, f1.Name, len(hs))
		}
	}

	// A write claim publishes through the controller (secrets and all)
	// and a stop releases through the node: both must reach the real
	// agents, nothing the attacker.
	vol := &structs.Volume{ID: "v1", Name: "v1", ExternalID: "ext-v1", PluginID: "hostdir",
		AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
		Secrets: structs.Secrets{"token": "s3cret"}}
	if _, err := mgmt.RegisterVolumes(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.PlaceAllocs(ctx, &structs.Alloc{ID: "a1", NodeID: w1.NodeID(), Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, func() error {
		a, _, err := mgmt.Alloc(ctx, "a1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("alloc a1 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	if _, err := mgmt.StopAllocs(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, applyWait, func() error {
		v, _, err := mgmt.Volume(ctx, "v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if v.HasClaims() {
			return fmt.Errorf("volume v1 exp: freed got: claims %v", v.AllClaims())
		}
		return nil
	})
	if n := csiCalls(cp.Audit(), "ControllerPublishVolume", "ext-v1"); n != 1 {
		t.Errorf("ControllerPublish on the real controller exp: 1 got: %d", n)
	}
	if n := csiCalls(wp.Audit(), "NodeUnpublishVolume", "ext-v1"); n != 1 {
		t.Errorf("NodeUnpublish on the real node exp: 1 (the release went to the node that had it mounted) got: %d", n)
	}
	if n := csiCalls(cp.Audit(), "ControllerUnpublishVolume", "ext-v1"); n != 1 {
		t.Errorf("ControllerUnpublish on the real controller exp: 1 got: %d", n)
	}
	for i, a := range attackers {
		if got := a.calls(); len(got) != 0 {
			t.Errorf("attacker %d's session exp: no calls meant for the victims got: %v", i, got)
		}
	}
}

// TestFinding3_MigrationModeTakesNoMembershipOrRaftOverPlaintext: with
// -tls-allow-plaintext a host without any certificate could join Raft as
// a voter (a plaintext RaftJoin, or the bootstrap hello) and read every
// secret in the log. Migration mode takes neither over plaintext, and
// plaintext Raft only from hosts already in the configuration.
func TestFinding3_MigrationModeTakesNoMembershipOrRaftOverPlaintext(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{Configure: func(cfg *server.Config) { cfg.TLSAllowPlaintext = true }})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	before := raftServers(t, mgmt)
	for _, entry := range []*harness.TestServer{leader, c.Followers()[0]} {
		a := mustDialAs(t, c, entry.Addr, certNone)
		// Plaintext is accepted (migration mode): an open call works.
		if err := a.call("Status.Ping", &structs.EmptyArgs{}, &struct{}{}); err != nil {
			t.Fatalf("plaintext ping at %s in migration mode exp: answered got: %v", entry.Name, err)
		}
		err := a.call("Operator.RaftJoin", &structs.RaftJoinRequest{Server: structs.ServerInfo{ID: "evil", Name: "evil", Addr: deadAddr(t)}}, &structs.GenericResponse{})
		if !isDenied(err) {
			t.Errorf("plaintext RaftJoin at %s exp: permission_denied got: %v", entry.Name, err)
		}
		err = a.call("Status.Hello", &structs.HelloRequest{}, &structs.HelloResponse{})
		if !isDenied(err) {
			t.Errorf("plaintext bootstrap hello at %s exp: permission_denied got: %v", entry.Name, err)
		}
		// A plaintext server-only call from a host that is no server.
		var hc structs.NodeConnResponse
		if err := a.call("Status.HasNodeConn", &structs.NodeConnRequest{NodeID: "n1"}, &hc); !isDenied(err) {
			t.Errorf("plaintext server-only call at %s with ACLs on and no server token exp: permission_denied got: %v", entry.Name, err)
		}
	}
	if after := raftServers(t, mgmt); !reflect.DeepEqual(after, before) {
		t.Fatalf("raft configuration after refused plaintext joins exp: %+v got: %+v", before, after)
	}

	// Plaintext Raft from 127.0.0.2, a host that is not in the Raft
	// configuration (the servers are on 127.0.0.1): closed at once and
	// counted.
	st, err := leader.ClientWithToken(c.ManagementToken()).Runtime(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", leader.Addr)
	if err != nil {
		t.Fatalf("dial from 127.0.0.2: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{byte(rpc.ProtoRaft)}); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [1]byte
	if _, err := conn.Read(b[:]); err == nil || isTimeout(err) {
		t.Errorf("plaintext raft connection from a non-member host exp: closed by the server got: %v", err)
	}
	harness.WaitFor(t, applyWait, func() error {
		now, err := leader.Client().Runtime(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if now.PlaintextRefused <= st.PlaintextRefused {
			return fmt.Errorf("PlaintextRefused exp: > %d got: %d", st.PlaintextRefused, now.PlaintextRefused)
		}
		return nil
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestFinding5_BlockingQueryChecksItsTokenBeforeAnswering: a blocking
// query that started with a valid token and waits while the token is
// deleted answers permission_denied, not the fresh data.
func TestFinding5_BlockingQueryChecksItsTokenBeforeAnswering(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	ctx := harness.Ctx(t, 2*time.Minute)
	if _, err := mgmt.ACLPolicyApply(ctx, "vol-read", "", `volume { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	for _, entry := range []*harness.TestServer{leader, c.Followers()[0]} {
		t.Run(entry.Name, func(t *testing.T) {
			// A fresh token each round: the last one was deleted.
			tok, err := mgmt.ACLTokenCreate(ctx, "reader-"+entry.Name, "", []string{"vol-read"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			waitACLApplied(t, c)
			a := mustDialAs(t, c, entry.Addr, tlsutil.RoleCLI)
			var first structs.VolumeListResponse
			if err := a.call("Volume.List", &structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: tok.SecretID}}, &first); err != nil {
				t.Fatalf("volume list with the token exp: allowed got: %v", err)
			}
			// The query that serves it waits at the leader (a consistent read).
			waitingBefore := queriesWaiting(t, leader)
			done := make(chan error, 1)
			var reply structs.VolumeListResponse
			go func() {
				done <- a.call("Volume.List", &structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: tok.SecretID,
					MinQueryIndex: first.Index, MaxQueryTime: time.Minute}}, &reply)
			}()
			harness.WaitFor(t, applyWait, func() error {
				if n := queriesWaiting(t, leader); n <= waitingBefore {
					return fmt.Errorf("blocking queries waiting on %s exp: > %d got: %d", leader.Name, waitingBefore, n)
				}
				return nil
			})
			if _, err := mgmt.ACLTokenDelete(ctx, tok.AccessorID); err != nil {
				t.Fatal(err)
			}
			// Fresh data: a volume the deleted token must not see.
			if _, err := mgmt.RegisterVolumes(ctx, &structs.Volume{ID: "secret-plans-" + entry.Name, Name: "x", ExternalID: "x-" + entry.Name,
				PluginID: "hostdir", AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !isDenied(err) {
					t.Fatalf("blocking query whose token was deleted while it waited exp: permission_denied got: %v (volumes %d)", err, len(reply.Volumes))
				}
			case <-time.After(30 * time.Second):
				t.Fatal("blocking query exp: answered after the change got: still waiting after 30 s")
			}
		})
	}
}

func queriesWaiting(t *testing.T, s *harness.TestServer) int64 {
	t.Helper()
	st, err := s.Client().Runtime(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return st.QueriesWaiting
}
