package adversary

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	netrpc "net/rpc"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

const (
	electionWait = 20 * time.Second
	applyWait    = 20 * time.Second
)

// certNone is an attacker without any certificate.
const certNone tlsutil.Role = ""

// attacker is one raw connection to one server: a yamux session over TLS
// with a chosen certificate (or plaintext without one), msgpack RPC on
// its streams. Calls the servers make back down the session (meant for a
// client node) are answered with success and recorded.
type attacker struct {
	cl *rpc.MuxClient

	mu       sync.Mutex
	received []string // methods the servers called on this session
}

// dialAs connects to addr as the holder of a role's certificate (certNone:
// plaintext, no certificate).
func dialAs(t *testing.T, c *harness.Cluster, addr string, role tlsutil.Role) (*attacker, error) {
	t.Helper()
	dial := rpc.Dialer(rpc.DefaultDialer)
	if role != certNone {
		cfg := c.PKI().Configurator(t, role).OutgoingConfig()
		dial = rpc.TLSDialer(rpc.DefaultDialer, func() *tls.Config { return cfg }, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := rpc.DialMux(ctx, dial, addr, nil)
	if err != nil {
		return nil, err
	}
	a := &attacker{cl: cl}
	t.Cleanup(func() { cl.Close() })
	go a.serveCallbacks()
	return a, nil
}

// mustDialAs is dialAs for a certificate the servers accept.
func mustDialAs(t *testing.T, c *harness.Cluster, addr string, role tlsutil.Role) *attacker {
	t.Helper()
	a, err := dialAs(t, c, addr, role)
	if err != nil {
		t.Fatalf("dial %s as %q exp: connected got: %v", addr, role, err)
	}
	return a
}

// call makes one call; the token is whatever args carries.
func (a *attacker) call(method string, args, reply any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a.cl.Call(ctx, method, args, reply)
}

// serveCallbacks answers every call a server makes down this session, as a
// client agent's session would, recording its method: a session bound to
// a node it does not own would see that node's calls here.
func (a *attacker) serveCallbacks() {
	rs := netrpc.NewServer()
	_ = rs.RegisterName("ClientCSI", &recorder{a: a})
	for {
		stream, err := a.cl.Session().AcceptStream()
		if err != nil {
			return
		}
		go rs.ServeCodec(rpc.NewServerCodec(stream, rpc.MaxRequestBytes))
	}
}

func (a *attacker) record(method string) {
	a.mu.Lock()
	a.received = append(a.received, method)
	a.mu.Unlock()
}

func (a *attacker) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.received...)
}

// recorder is the attacker's fake client agent: it says yes to everything,
// which is what would free a claim without any unmount.
type recorder struct{ a *attacker }

func (r *recorder) ControllerAttachVolume(args *structs.ClientCSIControllerAttachRequest, reply *structs.ClientCSIControllerAttachResponse) error {
	r.a.record("ControllerAttachVolume")
	return nil
}

func (r *recorder) ControllerDetachVolume(args *structs.ClientCSIControllerDetachRequest, reply *structs.ClientCSIControllerDetachResponse) error {
	r.a.record("ControllerDetachVolume")
	return nil
}

func (r *recorder) NodeDetachVolume(args *structs.ClientCSINodeDetachRequest, reply *structs.ClientCSINodeDetachResponse) error {
	r.a.record("NodeDetachVolume")
	return nil
}

// method is one registered RPC method with its access rule.
type method = harness.RPCMethod

// registeredMethods lists every method the servers register, each with
// its rule; a method without a rule fails the test.
func registeredMethods(t *testing.T) []method { return harness.RegisteredMethods(t) }

// callZero calls m with zero-valued arguments carrying token.
func (a *attacker) callZero(t *testing.T, m method, token string) error {
	t.Helper()
	args := reflect.New(m.Args).Interface()
	auth, ok := args.(structs.Authenticated)
	if !ok {
		t.Fatalf("%s: args %s exp: structs.Authenticated got: no Token/SetToken", m.Name, m.Args)
	}
	auth.SetToken(token)
	return a.call(m.Name, args, reflect.New(m.Reply).Interface())
}

// deniedCounts reads every running server's ACLDenied counter.
func deniedCounts(t *testing.T, c *harness.Cluster) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, s := range c.Servers {
		st, err := s.Client().Runtime(harness.Ctx(t, 10*time.Second))
		if err != nil {
			t.Fatalf("%s runtime: %v", s.Name, err)
		}
		out[s.Name] = st.ACLDenied
	}
	return out
}

// registerNode registers a node by hand with a known secret.
func registerNode(t *testing.T, cl *api.Client, id string) (secret string) {
	t.Helper()
	secret = "secret-" + id + "-" + structs.NewSecret()[:8]
	node := &structs.Node{ID: id, Name: id, SecretID: secret, Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, ExternalNodeID: "ext-" + id}}}
	if _, err := cl.RegisterNode(harness.Ctx(t, 30*time.Second), node); err != nil {
		t.Fatalf("register node %s: %v", id, err)
	}
	return secret
}

// isDenied: permission_denied, and the answer came from a server (not a
// broken connection).
func isDenied(err error) bool { return errors.Is(err, structs.ErrPermissionDenied) }

// isServerAnswer: the endpoint answered (any coded error or none), so the
// call got past the access check.
func isServerAnswer(err error) bool {
	if err == nil {
		return true
	}
	var coded *structs.CodedError
	return !errors.Is(err, rpc.ErrTransport) && errors.As(err, &coded) && !isDenied(err)
}

// waitACLApplied waits until every server has applied the leader's ACL
// state, so that each decides a call with the tokens it knows.
func waitACLApplied(t *testing.T, c *harness.Cluster) {
	t.Helper()
	harness.WaitFor(t, applyWait, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no leader")
		}
		want := l.Server().State().ACLIndex()
		for _, s := range c.Servers {
			if got := s.Server().State().ACLIndex(); got < want {
				return fmt.Errorf("%s ACL index exp: %d got: %d", s.Name, want, got)
			}
		}
		return nil
	})
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
