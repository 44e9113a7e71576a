package adversary

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/acl"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// credential is one kind of token an attacker may hold.
type credential struct {
	name  string
	token string
	// management, readOnly, nodeWrite: what the token's policies grant.
	management, readOnly, nodeWrite bool
	// aclToken: it resolves to an ACL token (a node secret does not).
	aclToken bool
	// knownEverywhere: every server has applied it, so the server a call
	// enters on decides it. A node secret is not an ACL token: a follower
	// cannot tell it from a token it has not applied yet, and leaves it to
	// the leader.
	knownEverywhere bool
}

// allowed is what the access rule says of a call with zero-valued
// arguments (so it acts for no node: a node secret does not help) by the
// holder of a certificate of role with cred.
func allowed(t *testing.T, m method, role tlsutil.Role, cred credential) bool {
	t.Helper()
	switch m.Rule.Kind {
	case "open", "bootstrap":
		return true
	case "server", "server-cert":
		return role == tlsutil.RoleServer
	case "management":
		return cred.management
	case "any-token":
		return cred.aclToken
	case "capability":
		if cred.management {
			return true
		}
		if cred.readOnly && m.Rule.Capability == acl.Read {
			return true
		}
		if m.Name == "Node.Register" && (role == tlsutil.RoleClient || role == tlsutil.RoleServer) {
			// A new node may register with a client certificate (an agent
			// run with -server and -client has only a server one).
			return true
		}
		// A write policy grants read too.
		return cred.nodeWrite && m.Rule.Resource == acl.Node && (m.Rule.Capability == acl.Write || m.Rule.Capability == acl.Read)
	}
	t.Fatalf("%s: access kind %q exp: one this matrix knows got: a new kind (teach the matrix)", m.Name, m.Rule.Kind)
	return false
}

// sideEffects are methods whose zero-valued call, when allowed, changes
// the cluster in a way that would upset the rest of the walk (a
// leadership transfer): they are called only where the rules refuse them.
var sideEffects = map[string]bool{"Operator.TransferLeadership": true}

// TestAdversary_EveryMethodEveryCredentialEveryEntry walks every registered
// method as the holder of every kind of certificate and token, entering on
// the leader and on a follower, and checks each answer against the
// method's rule: permission_denied exactly when the rule refuses, the
// endpoint's own answer otherwise, the same through a follower as at the
// leader, and a refusal counted by the server the call entered on (a rule
// checked only at the leader would be counted there instead). No error
// carries the token.
func TestAdversary_EveryMethodEveryCredentialEveryEntry(t *testing.T) {
	methods := registeredMethods(t)
	if t.Failed() {
		t.FailNow()
	}
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	ctx := harness.Ctx(t, 2*time.Minute)

	if _, err := mgmt.ACLPolicyApply(ctx, "read-everything", "", `
volume   { policy = "read" }
alloc    { policy = "read" }
node     { policy = "read" }
plugin   { policy = "read" }
operator { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.ACLPolicyApply(ctx, "node-write", "", `node { policy = "write" }`); err != nil {
		t.Fatal(err)
	}
	ro, err := mgmt.ACLTokenCreate(ctx, "read-only", "", []string{"read-everything"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	nw, err := mgmt.ACLTokenCreate(ctx, "node-writer", "", []string{"node-write"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	nodeSecret := registerNode(t, mgmt, "victim")
	waitACLApplied(t, c)
	c.WaitForApplied(leader.Server().Raft().AppliedIndex(), applyWait)

	creds := []credential{
		{name: "management token", token: c.ManagementToken(), management: true, aclToken: true, knownEverywhere: true},
		{name: "read-only token", token: ro.SecretID, readOnly: true, aclToken: true, knownEverywhere: true},
		{name: "node:write token", token: nw.SecretID, nodeWrite: true, aclToken: true, knownEverywhere: true},
		{name: "another node's secret", token: nodeSecret},
		{name: "no token", knownEverywhere: true},
	}
	roles := []tlsutil.Role{tlsutil.RoleServer, tlsutil.RoleClient, tlsutil.RoleCLI}

	calls, refusedTotal := 0, 0
	for _, entryKind := range []string{"leader", "follower"} {
		for _, role := range roles {
			for _, cred := range creds {
				l := c.Leader()
				if l != leader {
					t.Fatalf("leader exp: %s (unchanged: the walk's premise) got: %v", leader.Name, l)
				}
				entry := leader
				if entryKind == "follower" {
					entry = c.Followers()[0]
				}
				a := mustDialAs(t, c, entry.Addr, role)
				before := deniedCounts(t, c)
				refused := 0
				for _, m := range methods {
					want := allowed(t, m, role, cred)
					if want && sideEffects[m.Name] {
						continue
					}
					calls++
					err := a.callZero(t, m, cred.token)
					who := m.Name + " (" + m.Rule.Kind + " " + string(m.Rule.Resource) + ":" + string(m.Rule.Capability) +
						") with a " + string(role) + " certificate and " + cred.name + " entering on the " + entryKind
					if cred.token != "" && err != nil && strings.Contains(err.Error(), cred.token) {
						t.Errorf("%s: error text exp: without the token got: it holds it", who)
					}
					if !want {
						refused++
						if !isDenied(err) {
							t.Errorf("%s: exp: permission_denied got: %v", who, err)
						}
						continue
					}
					if !isServerAnswer(err) {
						t.Errorf("%s: exp: the endpoint's answer (allowed) got: %v", who, err)
					}
				}
				refusedTotal += refused
				after := deniedCounts(t, c)
				var total uint64
				for _, s := range c.Servers {
					total += after[s.Name] - before[s.Name]
				}
				if total != uint64(refused) {
					t.Errorf("%s certificate, %s, entering on the %s: ACLDenied on all servers exp: +%d (once per refusal) got: +%d",
						role, cred.name, entryKind, refused, total)
				}
				if cred.knownEverywhere {
					if got := after[entry.Name] - before[entry.Name]; got != uint64(refused) {
						t.Errorf("%s certificate, %s, entering on the %s: refusals counted where the calls entered (%s) exp: +%d got: +%d (a rule checked after forwarding)",
							role, cred.name, entryKind, entry.Name, refused, got)
					}
				}
			}
		}
	}
	t.Logf("%d methods: %d calls, %d refused", len(methods), calls, refusedTotal)
}

// TestAdversary_NoCertificateGetsNoCall: without a certificate an attacker
// reaches no endpoint on any server: plaintext is refused, and a TLS
// handshake without a client certificate fails.
func TestAdversary_NoCertificateGetsNoCall(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	caPEM, err := os.ReadFile(c.PKI().CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, s := range c.Servers {
		// Plaintext.
		if a, err := dialAs(t, c, s.Addr, certNone); err == nil {
			err = a.call("Status.Ping", &structs.EmptyArgs{}, &struct{}{})
			if err == nil || !errors.Is(err, rpc.ErrTransport) {
				t.Errorf("%s: plaintext Status.Ping exp: connection refused got: %v", s.Name, err)
			}
		}
		// TLS without a client certificate.
		noCert := &tls.Config{RootCAs: pool, ServerName: tlsutil.Name(tlsutil.RoleServer, tlsutil.DefaultRegion), MinVersion: tls.VersionTLS13}
		dial := rpc.TLSDialer(rpc.DefaultDialer, func() *tls.Config { return noCert }, false)
		ctx := harness.Ctx(t, 10*time.Second)
		if cl, err := rpc.DialMux(ctx, dial, s.Addr, nil); err == nil {
			var reply structs.VolumeListResponse
			err = cl.Call(ctx, "Volume.List", &structs.VolumeListRequest{}, &reply)
			cl.Close()
			if err == nil || !errors.Is(err, rpc.ErrTransport) {
				t.Errorf("%s: TLS without a client certificate exp: connection refused got: %v", s.Name, err)
			}
		}
	}
}
