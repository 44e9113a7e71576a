package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/acl"
	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/forward"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// rpcMethod is one registered method with its access rule.
type rpcMethod = harness.RPCMethod

func registeredMethods(t *testing.T) []rpcMethod { return harness.RegisteredMethods(t) }

// grant is one capability on one resource.
type grant struct {
	res acl.Resource
	cap acl.Capability
}

func (g grant) String() string { return string(g.res) + ":" + string(g.cap) }

// allGrants lists every capability of every resource.
func allGrants() []grant {
	var out []grant
	for _, r := range acl.Resources() {
		for _, c := range acl.Capabilities(r) {
			out = append(out, grant{r, c})
		}
	}
	return out
}

// principal is one way of calling: a token (or none) and what the rules
// say it may do.
type principal struct {
	name  string
	token string
	// management: a management token. valid: the token resolves to an ACL
	// token (not anonymous, unknown or expired). grants: what its policies
	// (or the anonymous policy) grant.
	management, valid bool
	grants            map[grant]bool
}

// allowed is what m's access rule says of p calling with a cli
// certificate, which is never a server certificate.
func (p principal) allowed(t *testing.T, m rpcMethod) bool {
	t.Helper()
	switch m.Rule.Kind {
	case "open", "bootstrap":
		return true
	case "server", "server-cert":
		return false
	case "management":
		return p.management
	case "any-token":
		return p.valid
	case "capability":
		return p.management || p.grants[grant{m.Rule.Resource, m.Rule.Capability}]
	}
	t.Fatalf("%s: access kind %q exp: one this matrix knows got: a new kind (teach the matrix what it allows)", m.Name, m.Rule.Kind)
	return false
}

func describeRule(r endpoints.AccessRule) string {
	s := r.Kind
	if r.Kind == "capability" {
		s += " " + grant{r.Resource, r.Capability}.String()
	}
	if r.Node {
		s += " or the node's secret"
	}
	return s
}

// callZero calls m with zero-valued arguments that carry token.
func callZero(t *testing.T, cl *api.Client, m rpcMethod, token string) error {
	t.Helper()
	args := reflect.New(m.Args).Interface()
	auth, ok := args.(structs.Authenticated)
	if !ok {
		t.Fatalf("%s: args %s exp: structs.Authenticated got: no Token/SetToken", m.Name, m.Args)
	}
	auth.SetToken(token)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.Call(ctx, m.Name, args, reflect.New(m.Reply).Interface())
}

// checkAs calls every method as p through cl and checks each answer against
// the rules: permission_denied exactly when they refuse, an error text that
// never holds the token, and for an allowed call an answer from the
// endpoint itself (zero-valued arguments may well be invalid or not found).
// It returns how many calls the rules refuse.
func checkAs(t *testing.T, cl *api.Client, methods []rpcMethod, p principal) (refused int) {
	t.Helper()
	for _, m := range methods {
		err := callZero(t, cl, m, p.token)
		if p.token != "" && err != nil && strings.Contains(err.Error(), p.token) {
			t.Errorf("%s as %s: error text exp: without the token's secret got: it holds it", m.Name, p.name)
		}
		denied := errors.Is(err, structs.ErrPermissionDenied)
		if !p.allowed(t, m) {
			refused++
			if !denied {
				t.Errorf("%s (%s) as %s: exp: permission_denied got: %v", m.Name, describeRule(m.Rule), p.name, err)
			}
			continue
		}
		var coded *structs.CodedError
		switch {
		case denied:
			t.Errorf("%s (%s) as %s: exp: allowed (any answer but permission_denied) got: %v", m.Name, describeRule(m.Rule), p.name, err)
		case err != nil && (errors.Is(err, rpc.ErrTransport) || !errors.As(err, &coded)):
			t.Errorf("%s as %s: exp: the endpoint's answer got: %v", m.Name, p.name, err)
		}
	}
	return refused
}

// capTokens makes one policy and one token per capability, each granting
// exactly that capability.
func capTokens(t *testing.T, mgmt *api.Client) map[grant]principal {
	t.Helper()
	ctx := harness.Ctx(t, 60*time.Second)
	out := map[grant]principal{}
	for _, g := range allGrants() {
		name := fmt.Sprintf("only-%s-%s", g.res, g.cap)
		rules := fmt.Sprintf("%s { capabilities = [%q] }", g.res, g.cap)
		if _, err := mgmt.ACLPolicyApply(ctx, name, "grants "+g.String()+" only", rules); err != nil {
			t.Fatalf("policy %s: %v", name, err)
		}
		tok, err := mgmt.ACLTokenCreate(ctx, name, "", []string{name}, 0)
		if err != nil {
			t.Fatalf("token %s: %v", name, err)
		}
		out[g] = principal{name: "token granting " + g.String(), token: tok.SecretID, valid: true, grants: map[grant]bool{g: true}}
	}
	return out
}

// deniedCount is the server's ACLDenied counter, read with Status.Runtime
// (never forwarded: each server reports its own).
func deniedCount(t *testing.T, cl *api.Client) uint64 {
	t.Helper()
	st, err := cl.Runtime(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatalf("runtime: %v", err)
	}
	return st.ACLDenied
}

// longHeartbeats keeps nodes that tests register by hand (no agent
// heartbeating them) ready for the whole test.
func longHeartbeats(cfg *server.Config) { cfg.HeartbeatTTL = time.Hour }

// TestAuthorizationMatrix calls every registered RPC method as every kind
// of caller and checks the answer against the method's access rule:
// a token granting the one capability the rule names is let through, a
// token granting any other single capability is refused, and so are
// anonymous callers (until the anonymous policy grants the capability),
// unknown and expired tokens; the management token passes everything but
// the server-only methods. Each refusal is counted once in ACLDenied and
// no error carries the token.
func TestAuthorizationMatrix(t *testing.T) {
	methods := registeredMethods(t)
	if t.Failed() {
		t.FailNow()
	}

	c := harness.NewCluster(t, 1, harness.Options{Configure: longHeartbeats})
	c.StartAll()
	s := c.WaitForLeader(electionWait)
	mgmt := s.Client()
	ctx := harness.Ctx(t, 2*time.Minute)
	// One session for every call; each call carries its own token.
	cl := s.ClientWithToken("")

	tokens := capTokens(t, mgmt)
	// An expired token: it works, then its TTL passes (it expires while
	// the capability tokens are checked).
	const ttl = 2 * time.Second
	created := time.Now()
	exp, err := mgmt.ACLTokenCreate(ctx, "expires", "", []string{"only-volume-read"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	expCl := s.ClientWithToken(exp.SecretID)
	if _, err := expCl.ACLTokenSelf(ctx); err != nil && time.Since(created) < ttl/2 {
		t.Fatalf("token with a TTL before it expires exp: works got: %v", err)
	}

	before := deniedCount(t, mgmt)
	refused := 0
	for _, g := range allGrants() {
		refused += checkAs(t, cl, methods, tokens[g])
	}
	refused += checkAs(t, cl, methods, principal{name: "the management token", token: c.ManagementToken(), management: true, valid: true})
	refused += checkAs(t, cl, methods, principal{name: "anonymous (no anonymous policy)"})

	// The anonymous policy grants volume:read to callers without a token;
	// unknown and expired tokens must not fall back to it.
	if _, err := mgmt.ACLPolicyApply(ctx, structs.AnonymousPolicy, "", `volume { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	volRead := map[grant]bool{{acl.Volume, acl.Read}: true}
	refused += checkAs(t, cl, methods, principal{name: "anonymous (anonymous policy volume:read)", grants: volRead})
	refused += checkAs(t, cl, methods, principal{name: "an unknown token", token: structs.NewSecret()})
	harness.WaitFor(t, 30*time.Second, func() error {
		_, err := expCl.ACLTokenSelf(ctx)
		if !errors.Is(err, structs.ErrPermissionDenied) {
			return fmt.Errorf("token past its TTL exp: permission_denied got: %v", err)
		}
		return nil
	})
	refused += checkAs(t, cl, methods, principal{name: "an expired token", token: exp.SecretID})

	// The poll above was refused once more, at its last call.
	if got := deniedCount(t, mgmt) - before; got != uint64(refused+1) {
		t.Errorf("ACLDenied exp: +%d (once per refused call) got: +%d", refused+1, got)
	}
	if _, err := mgmt.ACLPolicyDelete(ctx, structs.AnonymousPolicy); err != nil {
		t.Fatal(err)
	}

	callers := len(allGrants()) + 5 // management, two anonymous, unknown, expired
	t.Logf("%d methods, %d callers: %d calls, %d refused", len(methods), callers, len(methods)*callers, refused)

	t.Run("NodeSecret", func(t *testing.T) { checkNodeSecrets(t, s) })
	t.Run("NodeSessionBoundOnlyAfterAuthorization", func(t *testing.T) { checkSessionBinding(t, c, s, tokens) })
	t.Run("ThroughFollower", func(t *testing.T) { checkThroughFollower(t, methods) })
}

// nodeCall makes one call with args' own token (cl sends none of its own).
func nodeCall(t *testing.T, cl *api.Client, method string, args, reply any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.Call(ctx, method, args, reply)
}

// checkNodeSecrets: a node secret authorizes a call for its own node only.
func checkNodeSecrets(t *testing.T, s *harness.TestServer) {
	ctx := harness.Ctx(t, 2*time.Minute)
	mgmt := s.Client()
	cl := s.ClientWithToken("")
	registerNodes(t, mgmt, "na", "nb")
	const secretA, secretB = "secret-na", "secret-nb"
	if _, err := mgmt.RegisterVolumes(ctx, testVolume("va"), testVolume("vb")); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.PlaceAllocs(ctx,
		&structs.Alloc{ID: "aa", NodeID: "na", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "va"}}},
		&structs.Alloc{ID: "ab", NodeID: "nb", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "vb"}}},
	); err != nil {
		t.Fatal(err)
	}
	wantDenied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, structs.ErrPermissionDenied) {
			t.Errorf("%s: exp: permission_denied got: %v", what, err)
		}
		if strings.Contains(fmt.Sprint(err), secretA) {
			t.Errorf("%s: error text exp: without the node secret got: it holds it", what)
		}
	}
	alloc := func(id string) *structs.Alloc {
		t.Helper()
		a, _, err := mgmt.Alloc(ctx, id, structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	volume := func(id string) *structs.Volume {
		t.Helper()
		v, _, err := mgmt.Volume(ctx, id, structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// Node.UpdateStatus: its own node only.
	var nodeReply structs.NodeUpdateResponse
	if err := nodeCall(t, cl, "Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: "na", Status: structs.NodeStatusReady,
		WriteRequest: structs.WriteRequest{AuthToken: secretA}}, &nodeReply); err != nil {
		t.Fatalf("node na heartbeat with its own secret exp: allowed got: %v", err)
	}
	wantDenied("node nb marked down with na's secret", nodeCall(t, cl, "Node.UpdateStatus", &structs.NodeUpdateStatusRequest{
		NodeID: "nb", Status: structs.NodeStatusDown, WriteRequest: structs.WriteRequest{AuthToken: secretA}}, &nodeReply))
	if n, _, err := mgmt.Node(ctx, "nb", structs.QueryOptions{}); err != nil || n.Status != structs.NodeStatusReady {
		t.Errorf("node nb after a refused status update exp: ready got: %+v %v", n, err)
	}

	// Volume.Get: a node reads the volumes its allocations ask for (to
	// see whether its claims are still held), never another's, nor by
	// naming another node.
	var volReply structs.VolumeResponse
	if err := nodeCall(t, cl, "Volume.Get", &structs.VolumeSpecificRequest{ID: "va", NodeID: "na",
		QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &volReply); err != nil || volReply.Volume == nil || volReply.Volume.ID != "va" {
		t.Errorf("node na reading va (its alloc aa asks for it) exp: allowed got: %+v %v", volReply.Volume, err)
	}
	wantDenied("node na reading vb", nodeCall(t, cl, "Volume.Get", &structs.VolumeSpecificRequest{ID: "vb", NodeID: "na",
		QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &volReply))
	wantDenied("node na reading vb as nb", nodeCall(t, cl, "Volume.Get", &structs.VolumeSpecificRequest{ID: "vb", NodeID: "nb",
		QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &volReply))
	wantDenied("node na reading va without naming itself", nodeCall(t, cl, "Volume.Get", &structs.VolumeSpecificRequest{ID: "va",
		QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &volReply))

	// Node.UpdateAlloc: only allocations placed on the caller's node.
	abBefore := alloc("ab")
	update := func(node string) error {
		return nodeCall(t, cl, "Node.UpdateAlloc", &structs.AllocClientUpdateRequest{NodeID: node,
			Allocs:       []*structs.AllocClientUpdate{{ID: "ab", ClientStatus: structs.AllocClientFailed}},
			WriteRequest: structs.WriteRequest{AuthToken: secretA}}, &structs.GenericResponse{})
	}
	wantDenied("update of nb's alloc with na's secret naming nb", update("nb"))
	wantDenied("update of nb's alloc with na's secret naming no node", update(""))
	if err := update("na"); err == nil {
		t.Errorf("update of nb's alloc with na's secret naming na: exp: refused got: accepted")
	}
	if got := alloc("ab"); got.ClientStatus != abBefore.ClientStatus || got.ModifyIndex != abBefore.ModifyIndex {
		t.Errorf("alloc ab after refused updates exp: unchanged (%s @%d) got: %s @%d", abBefore.ClientStatus, abBefore.ModifyIndex, got.ClientStatus, got.ModifyIndex)
	}
	if err := nodeCall(t, cl, "Node.UpdateAlloc", &structs.AllocClientUpdateRequest{NodeID: "na",
		Allocs:       []*structs.AllocClientUpdate{{ID: "aa", ClientStatus: structs.AllocClientRunning}},
		WriteRequest: structs.WriteRequest{AuthToken: secretA}}, &structs.GenericResponse{}); err != nil {
		t.Errorf("update of na's own alloc with its secret exp: allowed got: %v", err)
	}

	// Volume.Claim: a claim for the caller's node only, and a release only
	// of the caller's own claims.
	claim := func(node, secret string, release bool) (*structs.VolumeClaimResponse, error) {
		var out structs.VolumeClaimResponse
		err := nodeCall(t, cl, "Volume.Claim", &structs.VolumeClaimRequest{VolumeID: "vb", AllocID: "ab", NodeID: node,
			Mode: structs.ClaimModeWrite, Release: release, WriteRequest: structs.WriteRequest{AuthToken: secret}}, &out)
		return &out, err
	}
	vbBefore := volume("vb")
	_, err := claim("nb", secretA, false)
	wantDenied("claim for nb with na's secret (forged node ID)", err)
	if _, err := claim("na", secretA, false); err == nil {
		t.Errorf("claim of nb's alloc for na with na's secret: exp: refused got: accepted")
	}
	if got := volume("vb"); got.ModifyIndex != vbBefore.ModifyIndex || got.HasClaims() {
		t.Errorf("volume vb after refused claims exp: unchanged, no claims got: modify %d -> %d, claims %v", vbBefore.ModifyIndex, got.ModifyIndex, got.AllClaims())
	}
	resp, err := claim("nb", secretB, false)
	if err != nil || resp.Claim == nil || resp.Claim.State != structs.ClaimStateTaken || resp.Volume == nil || resp.Volume.Secrets["token"] != "s3cret" {
		t.Fatalf("claim for nb with nb's secret exp: taken, with the volume's secrets got: %+v %v", resp, err)
	}
	vbBefore = volume("vb")
	_, err = claim("", secretA, true)
	wantDenied("release of nb's claim with na's secret", err)
	_, err = claim("na", secretA, true)
	wantDenied("release of nb's claim with na's secret naming na (forged node ID)", err)
	if got := volume("vb"); got.ModifyIndex != vbBefore.ModifyIndex || got.LiveClaim("ab") == nil {
		t.Errorf("volume vb after refused releases exp: ab's claim live, unchanged got: modify %d -> %d, claims %v", vbBefore.ModifyIndex, got.ModifyIndex, got.AllClaims())
	}

	// Alloc.List and Alloc.Get: the caller's node's allocations only.
	var list structs.AllocListResponse
	if err := nodeCall(t, cl, "Alloc.List", &structs.AllocListRequest{NodeID: "na", QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &list); err != nil ||
		len(list.Allocs) != 1 || list.Allocs[0].ID != "aa" {
		t.Errorf("na's allocs with na's secret exp: [aa] got: %v %v", list.Allocs, err)
	}
	wantDenied("all allocs with na's secret", nodeCall(t, cl, "Alloc.List", &structs.AllocListRequest{QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &list))
	wantDenied("nb's allocs with na's secret", nodeCall(t, cl, "Alloc.List", &structs.AllocListRequest{NodeID: "nb", QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &list))
	var one structs.AllocResponse
	if err := nodeCall(t, cl, "Alloc.Get", &structs.AllocSpecificRequest{ID: "aa", QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &one); err != nil || one.Alloc == nil {
		t.Errorf("na's alloc aa with na's secret exp: allowed got: %+v %v", one.Alloc, err)
	}
	wantDenied("nb's alloc ab with na's secret", nodeCall(t, cl, "Alloc.Get", &structs.AllocSpecificRequest{ID: "ab", QueryOptions: structs.QueryOptions{AuthToken: secretA}}, &one))

	// Node.Register: a known node re-registers with its own secret only; a
	// new node needs a client certificate or node:write.
	register := func(node *structs.Node, token string) error {
		return nodeCall(t, cl, "Node.Register", &structs.NodeRegisterRequest{Node: node, WriteRequest: structs.WriteRequest{AuthToken: token}}, &nodeReply)
	}
	if err := register(&structs.Node{ID: "na", Name: "na", SecretID: secretA, Status: structs.NodeStatusReady}, secretA); err != nil {
		t.Errorf("re-register of na with its own secret exp: allowed got: %v", err)
	}
	wantDenied("re-register of na with another secret, even by the management token",
		mgmt.Call(ctx, "Node.Register", &structs.NodeRegisterRequest{Node: &structs.Node{ID: "na", Name: "na", SecretID: "forged-" + secretA, Status: structs.NodeStatusReady}}, &nodeReply))
	if n, err := s.Server().State().NodeByID(nil, "na"); err != nil || n == nil || n.SecretID != secretA {
		t.Errorf("node na's secret after a refused re-register exp: %q got: %+v %v", secretA, n, err)
	}
	wantDenied("new node with no token over a cli certificate", register(&structs.Node{ID: "nc", SecretID: "secret-nc", Status: structs.NodeStatusReady}, ""))
	wantDenied("new node with another node's secret", register(&structs.Node{ID: "nc", SecretID: "secret-nc", Status: structs.NodeStatusReady}, secretA))
	if n, err := s.Server().State().NodeByID(nil, "nc"); err != nil || n != nil {
		t.Errorf("node nc after refused registrations exp: absent got: %+v %v", n, err)
	}
}

// checkSessionBinding: a call that claims to come from a node but is
// refused must not make the caller's session the node's (the servers would
// send that node's calls, with volume secrets, to the caller). s is the
// server the agent and the impostor talk to: the leader, which decides
// itself, or a follower, which binds only what the leader accepted.
func checkSessionBinding(t *testing.T, c *harness.Cluster, s *harness.TestServer, tokens map[grant]principal) {
	agent := c.StartClient("agent-"+s.Name, []string{s.Addr})
	id := agent.NodeID()
	conns := s.Server().NodeRouter().Conns()
	var bound *forward.NodeConn
	harness.WaitFor(t, applyWait, func() error {
		nc, ok := conns.Get(id)
		if !ok {
			return fmt.Errorf("agent %s's session exp: bound on %s got: none", id, s.Name)
		}
		bound = nc
		return nil
	})
	cl := s.ClientWithToken("")
	var reply structs.NodeUpdateResponse
	for _, token := range []string{"", tokens[grant{acl.Node, acl.Read}].token, structs.NewSecret()} {
		err := nodeCall(t, cl, "Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: id, Status: structs.NodeStatusReady,
			WriteRequest: structs.WriteRequest{AuthToken: token}}, &reply)
		if !errors.Is(err, structs.ErrPermissionDenied) {
			t.Errorf("heartbeat for the agent's node without its secret exp: permission_denied got: %v", err)
		}
		err = nodeCall(t, cl, "Node.Register", &structs.NodeRegisterRequest{Node: &structs.Node{ID: id, SecretID: "forged", Status: structs.NodeStatusReady},
			WriteRequest: structs.WriteRequest{AuthToken: token}}, &reply)
		if !errors.Is(err, structs.ErrPermissionDenied) {
			t.Errorf("register of the agent's node without its secret exp: permission_denied got: %v", err)
		}
	}
	if nc, ok := conns.Get(id); !ok || nc != bound {
		t.Errorf("node %s's session after refused calls on another session exp: the agent's got: rebound (%v)", id, ok)
	}
}

// checkThroughFollower: a call made to a follower is decided by the
// follower, where it entered; only a token the follower does not know
// (it may not have applied it yet) is left to the leader, with the
// caller's token and identity forwarded unchanged.
func checkThroughFollower(t *testing.T, all []rpcMethod) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	tokens := capTokens(t, mgmt)
	var methods []rpcMethod
	for _, m := range all {
		switch m.Name {
		case "Volume.Register", "Volume.Detach", "Node.Deregister", "Operator.RaftRemovePeer":
			methods = append(methods, m)
		}
	}
	if len(methods) != 4 {
		t.Fatalf("forwarded methods exp: 4 got: %d", len(methods))
	}
	counters := map[*harness.TestServer]*api.Client{}
	before := map[*harness.TestServer]uint64{}
	for _, s := range c.Servers {
		counters[s] = s.Client()
		before[s] = deniedCount(t, counters[s])
	}
	follower := c.Followers()[0]
	// The follower decides what enters it once it has the tokens: wait
	// until it has applied them (before, it leaves them to the leader).
	harness.WaitFor(t, applyWait, func() error {
		if l, f := leader.Server().State().ACLIndex(), follower.Server().State().ACLIndex(); f < l {
			return fmt.Errorf("follower ACL index exp: %d got: %d", l, f)
		}
		return nil
	})
	cl := follower.ClientWithToken("")
	refused := 0
	for _, g := range allGrants() {
		refused += checkAs(t, cl, methods, tokens[g])
	}
	refused += checkAs(t, cl, methods, principal{name: "the management token", token: c.ManagementToken(), management: true, valid: true})
	refused += checkAs(t, cl, methods, principal{name: "anonymous"})
	// A token the follower does not know may be one it has not applied
	// yet: the leader decides those (with the same caller identity).
	unknown := checkAs(t, cl, methods, principal{name: "an unknown token", token: structs.NewSecret()})
	for _, s := range c.Servers {
		var want uint64
		switch s {
		case follower:
			want = uint64(refused) // decided where the calls entered
		case leader:
			want = uint64(unknown)
		}
		if got := deniedCount(t, counters[s]) - before[s]; got != want {
			t.Errorf("%s (leader %v) ACLDenied exp: +%d got: +%d", s.Name, s == leader, want, got)
		}
	}
	t.Run("NodeSessionBoundOnlyAfterAuthorization", func(t *testing.T) { checkSessionBinding(t, c, follower, tokens) })

	// A real write through the follower with the one capability it needs.
	reg := follower.ClientWithToken(tokens[grant{acl.Volume, acl.Register}].token)
	out, err := reg.RegisterVolumes(harness.Ctx(t, 30*time.Second), testVolume("through-follower"))
	if err != nil {
		t.Fatalf("register through a follower with volume:register exp: ok got: %v", err)
	}
	c.WaitForApplied(out.Index, applyWait)
	if v, err := leader.Server().State().VolumeByID(nil, "through-follower"); err != nil || v == nil {
		t.Errorf("volume registered through a follower exp: on the leader got: %v %v", v, err)
	}
}

// TestACL_Lifecycle: bootstrap once (and once more after the reset
// procedure), policies that do not parse are refused whole, and deleting a
// policy or a token takes effect at the next call; secrets never show in
// reads, and every refusal is counted.
func TestACL_Lifecycle(t *testing.T) {
	c := harness.NewCluster(t, 1, harness.Options{Configure: longHeartbeats})
	c.StartAll()
	s := c.WaitForLeader(electionWait)
	ctx := harness.Ctx(t, 2*time.Minute)
	mgmtSecret := c.ManagementToken() // the first bootstrap
	mgmt := s.Client()
	anon := s.ClientWithToken("")

	// Bootstrap: once, then once more with the reset index in the leader's
	// data dir.
	_, err := anon.ACLBootstrap(ctx)
	m := regexp.MustCompile(`reset index (\d+)`).FindStringSubmatch(fmt.Sprint(err))
	if !errors.Is(err, structs.ErrConflict) || m == nil {
		t.Fatalf("second bootstrap exp: conflict naming the reset index got: %v", err)
	}
	if err := os.WriteFile(filepath.Join(s.DataDir, "acl-bootstrap-reset"), []byte(m[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := anon.ACLBootstrap(ctx)
	if err != nil || again == nil || again.SecretID == "" || again.Type != structs.ACLTokenManagement {
		t.Fatalf("bootstrap after writing the reset index exp: a new management token got: %+v %v", again, err)
	}
	if self, err := s.ClientWithToken(again.SecretID).ACLTokenSelf(ctx); err != nil || self.AccessorID != again.AccessorID {
		t.Fatalf("the reset bootstrap's token exp: works got: %+v %v", self, err)
	}
	if _, err := anon.ACLBootstrap(ctx); !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("bootstrap after the reset one exp: conflict got: %v", err)
	}

	// A policy with an unknown capability is refused, naming it; nothing is
	// written.
	policies, err := mgmt.ACLPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mgmt.ACLPolicyApply(ctx, "bad", "", `volume { capabilities = ["read", "teleport"] }`)
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(fmt.Sprint(err), `"teleport"`) {
		t.Fatalf("policy with an unknown capability exp: invalid naming \"teleport\" got: %v", err)
	}
	if after, err := mgmt.ACLPolicies(ctx); err != nil || !reflect.DeepEqual(after, policies) {
		t.Fatalf("policies after a refused apply exp: %v got: %v %v", policies, after, err)
	}

	// A volume-read token: reads, cannot detach; its reads stop at the next
	// call after its policy goes, and after it goes itself.
	if _, err := mgmt.ACLPolicyApply(ctx, "volume-read", "", `volume { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx, "reader", "", []string{"volume-read"}, 0)
	if err != nil || tok.SecretID == "" {
		t.Fatalf("create token exp: a token with its secret got: %+v %v", tok, err)
	}
	reader := s.ClientWithToken(tok.SecretID)
	self, err := reader.ACLTokenSelf(ctx)
	if err != nil || self.AccessorID != tok.AccessorID || self.SecretID != "" || !reflect.DeepEqual(self.Policies, []string{"volume-read"}) {
		t.Fatalf("token self exp: accessor %s, policies [volume-read], no secret got: %+v %v", tok.AccessorID, self, err)
	}
	if _, _, err := reader.Volumes(ctx, "", structs.QueryOptions{}); err != nil {
		t.Fatalf("volume list with volume:read exp: ok got: %v", err)
	}

	// Token reads never carry a secret.
	secrets := []string{mgmtSecret, again.SecretID, tok.SecretID}
	if st := s.Server().State().ServerToken(); st != nil {
		secrets = append(secrets, st.SecretID)
	}
	list, err := mgmt.ACLTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one, err := mgmt.ACLToken(ctx, tok.AccessorID)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range append(list, one, self) {
		dump := fmt.Sprintf("%+v", *got)
		for _, sec := range secrets {
			if got.SecretID != "" || strings.Contains(dump, sec) {
				t.Errorf("token read %s exp: no secret got: %s", got.AccessorID, dump)
			}
		}
		if got.Type == structs.ACLTokenServer {
			t.Errorf("token list exp: without the server token got: %s", dump)
		}
	}
	if len(list) != 3 {
		t.Errorf("token list exp: 3 tokens (two bootstrap, reader) got: %d", len(list))
	}

	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, structs.ErrPermissionDenied) {
			t.Errorf("%s: exp: permission_denied got: %v", what, err)
		}
	}
	counted := func(what string, call func() error) {
		t.Helper()
		before := deniedCount(t, mgmt)
		denied(what, call())
		if got := deniedCount(t, mgmt) - before; got != 1 {
			t.Errorf("%s: ACLDenied exp: +1 got: +%d", what, got)
		}
	}

	// A read-only token cannot detach a claimed volume; the claim stays.
	registerNodes(t, mgmt, "n1")
	if _, err := mgmt.RegisterVolumes(ctx, testVolume("vol")); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.PlaceAllocs(ctx, &structs.Alloc{ID: "a1", NodeID: "n1", Volumes: []*structs.AllocVolumeRequest{{VolumeID: "vol"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: "vol", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite,
		WriteRequest: structs.WriteRequest{AuthToken: "secret-n1"}}); err != nil {
		t.Fatal(err)
	}
	volBefore, _, err := mgmt.Volume(ctx, "vol", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counted("volume detach with volume:read only", func() error {
		_, err := reader.DetachVolume(ctx, "vol", "n1", false)
		return err
	})
	if v, _, err := mgmt.Volume(ctx, "vol", structs.QueryOptions{}); err != nil || v.ModifyIndex != volBefore.ModifyIndex ||
		v.LiveClaim("a1") == nil || v.LiveClaim("a1").State != structs.ClaimStateTaken {
		t.Errorf("volume after a refused detach exp: a1's claim taken, unchanged got: %+v %v", v, err)
	}

	// Deleting the policy: the token's next call is refused.
	if _, err := mgmt.ACLPolicyDelete(ctx, "volume-read"); err != nil {
		t.Fatal(err)
	}
	counted("volume list after the token's policy was deleted", func() error {
		_, _, err := reader.Volumes(ctx, "", structs.QueryOptions{})
		return err
	})
	// Back again: the token works again (it names the policy).
	if _, err := mgmt.ACLPolicyApply(ctx, "volume-read", "", `volume { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reader.Volumes(ctx, "", structs.QueryOptions{}); err != nil {
		t.Fatalf("volume list after the policy is back exp: ok got: %v", err)
	}
	// Deleting the token: its next call is refused.
	if _, err := mgmt.ACLTokenDelete(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	counted("volume list after the token was deleted", func() error {
		_, _, err := reader.Volumes(ctx, "", structs.QueryOptions{})
		return err
	})
	counted("token self after the token was deleted", func() error {
		_, err := reader.ACLTokenSelf(ctx)
		return err
	})
	if _, err := mgmt.ACLToken(ctx, tok.AccessorID); !errors.Is(err, structs.ErrNotFound) {
		t.Errorf("deleted token read exp: not_found got: %v", err)
	}
}

// TestACL_SurvivesLeaderChange: tokens and policies live in Raft state, so
// they work on a new leader; the new leader's release work needs no user
// token (it calls the nodes with the server credentials).
func TestACL_SurvivesLeaderChange(t *testing.T) {
	e := newReleaseEnvOpts(t, harness.Options{Configure: shortStorageLease}, nil, "w1")
	ctx := harness.Ctx(t, 3*time.Minute)
	const rules = `
volume { policy = "read" }
alloc { capabilities = ["read", "place", "stop"] }
`
	if _, err := e.api.ACLPolicyApply(ctx, "scheduler", "places and stops allocs", rules); err != nil {
		t.Fatal(err)
	}
	tok, err := e.api.ACLTokenCreate(ctx, "scheduler", "", []string{"scheduler"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	old := e.c.WaitForLeader(electionWait)
	sched := old.ClientWithToken(tok.SecretID)
	if _, err := sched.PlaceAllocs(ctx, &structs.Alloc{ID: "a1", NodeID: e.clients["w1"].NodeID(),
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
		t.Fatalf("place with the scheduler token exp: ok got: %v", err)
	}
	e.waitAlloc(t, "a1", structs.AllocClientRunning)

	old.Stop()
	leader := e.c.WaitForLeader(electionWait)
	followers := e.c.Followers()
	if len(followers) != 1 {
		t.Fatalf("running followers after the leader change exp: 1 got: %d", len(followers))
	}
	follower := followers[0]
	// The token works on the new leader and through the remaining
	// follower; it still grants nothing more.
	for _, s := range []*harness.TestServer{leader, follower} {
		cl := s.ClientWithToken(tok.SecretID)
		if self, err := cl.ACLTokenSelf(ctx); err != nil || self.AccessorID != tok.AccessorID {
			t.Fatalf("token self via %s after the leader change exp: the token got: %+v %v", s.Name, self, err)
		}
		if _, _, err := cl.Volume(ctx, "v1", structs.QueryOptions{}); err != nil {
			t.Fatalf("volume read via %s after the leader change exp: ok got: %v", s.Name, err)
		}
		if _, err := cl.DetachVolume(ctx, "v1", e.clients["w1"].NodeID(), false); !errors.Is(err, structs.ErrPermissionDenied) {
			t.Fatalf("volume detach via %s with the scheduler token exp: permission_denied got: %v", s.Name, err)
		}
	}

	// Stop the alloc with the scheduler token; the release (node detach,
	// controller detach) is the new leader's own work. The agent unmounts
	// first; the old leader, stopped, never told the new one which entries
	// it applies, so the node's statement is not written (decision 61) and
	// the new leader's node detach runs too, finding nothing mounted.
	sched = follower.ClientWithToken(tok.SecretID)
	if _, err := sched.StopAllocs(ctx, "a1"); err != nil {
		t.Fatalf("stop with the scheduler token exp: ok got: %v", err)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		v, _, err := sched.Volume(ctx, "v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if v.HasClaims() {
			return fmt.Errorf("volume v1 claims exp: none got: %v", v.AllClaims())
		}
		evals, _, err := sched.Evals(ctx, structs.EvalStatusPending, "v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(evals) > 0 {
			return fmt.Errorf("pending evals of v1 exp: 0 got: %d", len(evals))
		}
		return nil
	})
	audit := e.auditAll()
	checkDetachOrder(t, audit, nil)
	if n := countCalls(audit, "NodeUnpublishVolume", "ext-v1", "ok"); n != 2 {
		t.Errorf("NodeUnpublish of v1 after the leader change exp: 2 (the agent's own, the new leader's) got: %d", n)
	}
	if n := countCalls(audit, "ControllerUnpublishVolume", "ext-v1", "ok"); n < 1 {
		t.Errorf("ControllerUnpublish of v1 after the leader change exp: >= 1 got: %d", n)
	}
}
