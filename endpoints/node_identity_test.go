package endpoints

import (
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

func (w *world) node(role tlsutil.Role) (*Node, ConnInfo) {
	conn := w.conn(role)
	return w.receivers(conn)["Node"].(*Node), conn
}

func regNode(id, secret, token string) *structs.NodeRegisterRequest {
	return &structs.NodeRegisterRequest{Node: &structs.Node{ID: id, SecretID: secret, Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{"p": {PluginID: "p", Healthy: true, ExternalNodeID: "ext"}}},
		WriteRequest: structs.WriteRequest{AuthToken: token}}
}

// The takeover of issue 38: a node:write token deregisters n1 and at once
// registers "a new node" with n1's ID and its own secret. Refused on the
// leader and at a follower's door (never forwarded), nothing written, no
// session bound; n1 itself comes back with its own secret, no token.
func TestNodeRegister_DeregisteredIDStaysBoundToItsSecret(t *testing.T) {
	for _, leader := range []bool{true, false} {
		w := newWorld(t, leader)
		w.state.Must(t, structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
		for _, c := range []struct {
			role  tlsutil.Role
			token string
		}{{tlsutil.RoleClient, w.nodeW}, {tlsutil.RoleCLI, w.nodeW}, {tlsutil.RoleClient, ""}, {tlsutil.RoleClient, w.mgmt}} {
			node, _ := w.node(c.role)
			before := w.state.State().LatestIndex()
			err := node.Register(regNode("n1", "attacker", c.token), &structs.NodeUpdateResponse{})
			if !denied(err) || !strings.Contains(err.Error(), "reserved") || strings.Contains(err.Error(), "attacker") {
				t.Fatalf("leader %v, %s certificate: registering deregistered n1 with another secret exp: permission_denied "+
					"(reserved, no secret in the error) got: %v", leader, c.role, err)
			}
			if got := w.state.State().LatestIndex(); got != before {
				t.Fatalf("leader %v: refused registration exp: nothing written got: index %d → %d", leader, before, got)
			}
		}
		if len(w.sessions.bound) != 0 || len(w.fwd.sent()) != 0 {
			t.Fatalf("leader %v: after refused registrations exp: no session bound, nothing forwarded got: %v, %v", leader, w.sessions.bound, w.fwd.sent())
		}
		if !leader {
			continue
		}
		node, conn := w.node(tlsutil.RoleClient)
		if err := node.Register(regNode("n1", "s-n1", ""), &structs.NodeUpdateResponse{}); err != nil {
			t.Fatalf("n1 coming back with its own secret exp: registered got: %v", err)
		}
		if w.sessions.bound["n1"] != conn.Session {
			t.Fatalf("n1's session after it came back exp: its own got: not bound")
		}
	}
}

// racingWriter applies a competing registration of the same new ID just
// before the caller's: both passed the endpoint's check while the ID was
// free, and the state machine refuses the second.
type racingWriter struct {
	localServer
	first *structs.NodeRegisterRequest
}

func (r racingWriter) Apply(t structs.MessageType, msg any) (any, uint64, error) {
	if t == structs.NodeRegisterRequestType {
		if _, _, err := r.localServer.Apply(t, r.first); err != nil {
			return nil, 0, err
		}
	}
	return r.localServer.Apply(t, msg)
}

// The session is bound only once the state machine took the registration:
// the loser of a race for a new ID does not keep the session it registered
// on (it used to be bound before the apply).
func TestNodeRegister_LoserOfARaceForANewIDBindsNoSession(t *testing.T) {
	w := newWorld(t, true)
	w.deps.Writer = racingWriter{localServer{w.state}, regNode("n9", "winner", w.nodeW)}
	node, _ := w.node(tlsutil.RoleClient)
	if err := node.Register(regNode("n9", "loser", ""), &structs.NodeUpdateResponse{}); !denied(err) {
		t.Fatalf("the second registration of n9 exp: permission_denied (the state machine) got: %v", err)
	}
	if s, ok := w.sessions.bound["n9"]; ok {
		t.Fatalf("n9's session exp: not bound to the loser got: %v", s)
	}
}

// Node.Purge is a management token's: node:write is refused; a registered
// node is refused ("deregister it first"); afterwards the reply lists the
// claims still held and says they wait for -force, and the ID is free for
// another secret.
func TestNodePurge(t *testing.T) {
	w := newWorld(t, true)
	resp := w.state.Must(t, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{{
		VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite}}}).(*structs.ClaimBatchResponse)
	if err := resp.Results[0].Err(); err != nil {
		t.Fatal(err)
	}
	node, _ := w.node(tlsutil.RoleCLI)
	purge := func(token string) (*structs.NodePurgeResponse, error) {
		var reply structs.NodePurgeResponse
		err := node.Purge(&structs.NodePurgeRequest{NodeID: "n1", WriteRequest: structs.WriteRequest{AuthToken: token}}, &reply)
		return &reply, err
	}
	if _, err := purge(w.nodeW); !denied(err) {
		t.Fatalf("purge with node:write exp: permission_denied got: %v", err)
	}
	if _, err := purge(w.mgmt); err == nil || !strings.Contains(err.Error(), "deregister it first") {
		t.Fatalf("purge of a registered node exp: deregister it first got: %v", err)
	}
	w.state.Must(t, structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	reply, err := purge(w.mgmt)
	if err != nil {
		t.Fatalf("purge of deregistered n1 exp: done got: %v", err)
	}
	if len(reply.Claims) != 1 || reply.Claims[0] != "v1/a1" || !strings.Contains(reply.Note, "-force") || !strings.Contains(reply.Note, "never releases") {
		t.Fatalf("purge reply exp: claim v1/a1 waiting for -force, never released by a newcomer got: %+v", reply)
	}
	if _, err := purge(w.mgmt); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("second purge exp: not found got: %v", err)
	}
	reg, _ := w.node(tlsutil.RoleClient)
	if err := reg.Register(regNode("n1", "newcomer", ""), &structs.NodeUpdateResponse{}); err != nil {
		t.Fatalf("registering the purged ID with another secret exp: allowed got: %v", err)
	}
}
