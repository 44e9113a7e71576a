package adversary

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// beat is a heartbeat for node with token, as a follower forwards it:
// marked forwarded, with the origin it entered on.
func beat(node, token string, origin structs.CallOrigin) *structs.NodeUpdateStatusRequest {
	hb := &structs.NodeUpdateStatusRequest{NodeID: node, Status: structs.NodeStatusReady}
	hb.AuthToken, hb.Forwarded, hb.Origin = token, true, origin
	return hb
}

// TestHeartbeatBatch_EachHeartbeatJudgedByItsOwnCredential: the batch a
// follower sends its agents' heartbeats in (decision 43) grants nothing
// its heartbeats would not. Only a server certificate may send one; in it,
// each heartbeat is checked at the leader with its own token and origin
// and fails alone: another node's secret, or a forged server origin
// without a token, is refused while the agent's own heartbeat next to it
// is served. An oversized batch is refused naming the field. Through a
// follower, heartbeats sent at once by an agent are all answered.
func TestHeartbeatBatch_EachHeartbeatJudgedByItsOwnCredential(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	secretA := registerNode(t, mgmt, "agent-a")
	registerNode(t, mgmt, "agent-b")
	// agent-a runs fenced workloads: its heartbeats renew a lease, which
	// only a leader that confirmed its leadership after they arrived gives.
	lease := 2 * structs.MinNodeLease
	nodeA, _, err := mgmt.Node(harness.Ctx(t, 10*time.Second), "agent-a", structs.QueryOptions{})
	if err != nil || nodeA == nil {
		t.Fatalf("read agent-a: %v", err)
	}
	nodeA.SecretID, nodeA.Lease = secretA, lease
	if _, err := mgmt.RegisterNode(harness.Ctx(t, 30*time.Second), nodeA); err != nil {
		t.Fatalf("register agent-a with a lease: %v", err)
	}
	waitACLApplied(t, c)
	c.WaitForApplied(leader.Server().Raft().AppliedIndex(), applyWait)
	follower := c.Followers()[0]

	clientOrigin := structs.CallOrigin{TLS: true, Role: string(tlsutil.RoleClient)}
	batch := func() *structs.NodeHeartbeatBatchRequest {
		return &structs.NodeHeartbeatBatchRequest{Heartbeats: []*structs.NodeUpdateStatusRequest{
			beat("agent-a", secretA, clientOrigin),
			beat("agent-b", secretA, clientOrigin),
			beat("agent-a", "", structs.CallOrigin{TLS: true, Role: string(tlsutil.RoleServer)}),
			beat("agent-a", secretA, structs.CallOrigin{}),
		}}
	}

	// Only a server sends batches, wherever the call enters.
	for _, role := range []tlsutil.Role{tlsutil.RoleClient, tlsutil.RoleCLI} {
		for _, entry := range []*harness.TestServer{leader, follower} {
			a := mustDialAs(t, c, entry.Addr, role)
			err := a.call("Node.UpdateStatusBatch", batch(), &structs.NodeHeartbeatBatchResponse{})
			if !isDenied(err) {
				t.Errorf("a heartbeat batch from a %s certificate at %s exp: permission_denied got: %v", role, entry.Name, err)
			}
		}
	}

	denied := deniedCounts(t, c)
	srv := mustDialAs(t, c, leader.Addr, tlsutil.RoleServer)
	var resp structs.NodeHeartbeatBatchResponse
	if err := srv.call("Node.UpdateStatusBatch", batch(), &resp); err != nil {
		t.Fatalf("a heartbeat batch from a server certificate exp: answered got: %v", err)
	}
	if len(resp.Results) != 4 {
		t.Fatalf("results exp: 4 got: %d", len(resp.Results))
	}
	for i, want := range []string{"", "permission_denied", "permission_denied", ""} {
		res := resp.Results[i]
		switch {
		case want == "" && (res.Error != "" || res.Response.HeartbeatTTL <= 0 || res.Response.Lease != lease):
			t.Errorf("heartbeat %d (agent-a with its own secret) exp: served with a TTL and its lease %s got: %+v", i, lease, res)
		case want != "" && !strings.HasPrefix(res.Error, want+":"):
			t.Errorf("heartbeat %d exp: %s got: %+v", i, want, res)
		}
		if strings.Contains(res.Error, secretA) {
			t.Errorf("heartbeat %d's error carries the node secret: %q", i, res.Error)
		}
	}
	after := deniedCounts(t, c)
	if got := after[leader.Name] - denied[leader.Name]; got != 2 {
		t.Errorf("refusals counted at the leader exp: 2 (one per refused heartbeat) got: %d", got)
	}

	tooMany := &structs.NodeHeartbeatBatchRequest{}
	for range structs.MaxHeartbeatBatch + 1 {
		tooMany.Heartbeats = append(tooMany.Heartbeats, beat("agent-a", secretA, clientOrigin))
	}
	err = srv.call("Node.UpdateStatusBatch", tooMany, &structs.NodeHeartbeatBatchResponse{})
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "heartbeats") {
		t.Errorf("a batch of %d exp: invalid naming heartbeats got: %v", len(tooMany.Heartbeats), err)
	}

	// The agent's own heartbeats through a follower, sent at once (the
	// follower gathers them into batches), are each answered.
	agent := mustDialAs(t, c, follower.Addr, tlsutil.RoleClient)
	const n = 20
	errs := make([]error, n)
	ttls := make([]time.Duration, n)
	leases := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := &structs.NodeUpdateStatusRequest{NodeID: "agent-a", Status: structs.NodeStatusReady}
			args.AuthToken = secretA
			var reply structs.NodeUpdateResponse
			errs[i] = agent.call("Node.UpdateStatus", args, &reply)
			ttls[i], leases[i] = reply.HeartbeatTTL, reply.Lease
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ttls[i] <= 0 || leases[i] != lease {
			t.Errorf("heartbeat %d through %s exp: answered with a TTL and the lease %s got: ttl %s, lease %s, %v", i, follower.Name, lease, ttls[i], leases[i], errs[i])
		}
	}
	if t.Failed() {
		t.Log(fmt.Sprintf("leader %s, follower %s", leader.Name, follower.Name))
	}
}
