package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	netrpc "net/rpc"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// These tests attack the shared port of a secure cluster (mutual TLS and
// ACLs, the harness default) from the outside, with raw TCP and hand-made
// TLS, and check three things each time: the connection is closed, the
// server counts it (structs.RuntimeStats), and nothing changed (Raft last
// index, state digest, no volume or node).

// serverName is the name a server certificate must carry.
var serverName = tlsutil.Name(tlsutil.RoleServer, tlsutil.DefaultRegion)

// secureLeader starts a secure cluster of n servers and returns its leader
// and a management client for it, once the cluster is quiet: ACLs
// bootstrapped, the server token committed, everything applied.
func secureLeader(t *testing.T, n int) (*harness.Cluster, *harness.TestServer, *api.Client) {
	t.Helper()
	return secureLeaderWith(t, n, harness.Options{})
}

// testHandshakeBound is the TLS handshake bound (-tls-handshake-timeout)
// of the servers of the tests that wait for a stalled handshake to be
// closed at it: they assert the same deadline as at the default, without
// waiting out the default's 10 s.
const testHandshakeBound = 3 * time.Second

// withHandshakeBound: servers whose TLS handshake bound is d.
func withHandshakeBound(d time.Duration) harness.Options {
	return harness.Options{Configure: func(cfg *server.Config) { cfg.TLSHandshakeTimeout = d }}
}

// secureLeaderWith is secureLeader with the cluster's options.
func secureLeaderWith(t *testing.T, n int, opts harness.Options) (*harness.Cluster, *harness.TestServer, *api.Client) {
	t.Helper()
	c := harness.NewCluster(t, n, opts)
	c.StartAll()
	s := c.WaitForLeader(electionWait)
	cl := s.Client()
	harness.WaitFor(t, applyWait, func() error {
		if _, err := cl.Runtime(harness.Ctx(t, 10*time.Second)); err != nil {
			return err
		}
		if s.Server().State().ServerToken() == nil {
			return errors.New("server token not committed yet")
		}
		r := s.Server().Raft()
		if last, applied := r.LastIndex(), r.AppliedIndex(); last != applied {
			return fmt.Errorf("applied index exp: %d got: %d", last, applied)
		}
		return nil
	})
	return c, s, cl
}

// stateMark is what "nothing changed" compares: the state itself (its
// digest and row counts) and the Raft log's length with the term it was
// read in.
type stateMark struct {
	lastIndex, termBefore, termAfter uint64
	sha256                           string
	bytes                            int64
	volumes, nodes                   int
}

func markState(t *testing.T, s *harness.TestServer, cl *api.Client) stateMark {
	t.Helper()
	var d *structs.StateDigest
	harness.WaitFor(t, applyWait, func() error {
		var err error
		if d, err = cl.StateDigest(harness.Ctx(t, 10*time.Second)); err != nil {
			return fmt.Errorf("state digest: %w", err)
		}
		return nil
	})
	vols, err := s.Server().State().Volumes(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := s.Server().State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The term read on both sides of the index: an election between the
	// reads cannot make the comparison below stricter than it should be.
	termBefore := raftTerm(t, s)
	last := s.Server().Raft().LastIndex()
	return stateMark{lastIndex: last, termBefore: termBefore, termAfter: raftTerm(t, s),
		sha256: d.SHA256, bytes: d.Bytes, volumes: len(vols), nodes: len(nodes)}
}

func raftTerm(t *testing.T, s *harness.TestServer) uint64 {
	t.Helper()
	term, err := strconv.ParseUint(s.Server().Raft().Stats()["term"], 10, 64)
	if err != nil {
		t.Fatalf("raft term: %v", err)
	}
	return term
}

// requireUnchanged fails unless the state is the same and nothing but
// leader elections wrote to the Raft log. A server that wins an election
// appends a no-op and then its barrier (server/leader.go), neither a
// command, so each new term may add at most two entries; on a busy machine
// a leader can miss its lease and be re-elected during a test. With no new
// term the log must not have moved at all: a refused request must never
// become an entry, even one the state machine then rejects.
func requireUnchanged(t *testing.T, s *harness.TestServer, cl *api.Client, before stateMark) {
	t.Helper()
	after := markState(t, s, cl)
	if after.sha256 != before.sha256 || after.bytes != before.bytes || after.volumes != before.volumes || after.nodes != before.nodes {
		t.Fatalf("state exp: unchanged %+v got: %+v", before, after)
	}
	moved, terms := after.lastIndex-before.lastIndex, after.termAfter-before.termBefore
	if moved > 2*terms {
		t.Fatalf("raft log exp: at most a no-op and a barrier per new term (%d new terms) got: %d new entries (%+v -> %+v)",
			terms, moved, before, after)
	}
}

func runtimeStats(t *testing.T, cl *api.Client) structs.RuntimeStats {
	t.Helper()
	st, err := cl.Runtime(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatalf("runtime stats: %v", err)
	}
	return *st
}

// expectClosed reads conn until the peer closes it (EOF, reset, TLS alert)
// or the within deadline passes. It returns how long that took, or an error
// if the connection was still open at the deadline.
func expectClosed(conn net.Conn, within time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(within))
	_, err := io.Copy(io.Discard, conn)
	elapsed := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return elapsed, fmt.Errorf("exp: the server closes the connection got: still open after %s", elapsed.Round(time.Millisecond))
	}
	return elapsed, nil
}

func dialRaw(t *testing.T, addr string, first ...byte) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if len(first) > 0 {
		if _, err := conn.Write(first); err != nil {
			t.Fatalf("write %x: %v", first, err)
		}
	}
	return conn
}

// dialTLS writes ProtoTLS on a new connection and completes the client side
// of the handshake with cfg. In TLS 1.3 the client finishes before the
// server has checked the client's certificate, so a success here does not
// mean the server accepted it.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	raw := dialRaw(t, addr, byte(rpc.ProtoTLS))
	_ = raw.SetDeadline(time.Now().Add(rpc.HandshakeTimeout))
	tc := tls.Client(raw, cfg)
	err := tc.Handshake()
	_ = raw.SetDeadline(time.Time{})
	return tc, err
}

// roleConfig is a client TLS config presenting the PKI's certificate of
// role and verifying the server as the CLI does.
func roleConfig(t *testing.T, pki *harness.PKI, role tlsutil.Role) *tls.Config {
	t.Helper()
	cfg, err := tlsutil.ClientConfigFromFiles(pki.CAFile, pki.CertFile[role], pki.KeyFile[role], "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// handCert signs a certificate for role with ca, valid in [notBefore,
// notAfter], built with crypto/x509 directly: tlsutil refuses to issue
// (and to load) a certificate that is already expired.
func handCert(t *testing.T, ca *tlsutil.CA, role tlsutil.Role, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		t.Fatal(err)
	}
	name := tlsutil.Name(role, tlsutil.DefaultRegion)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:              []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// apiClient is an api client for addr with tlsCfg (nil: plaintext) and
// token, that never retries no_leader.
func apiClient(t *testing.T, addr string, tlsCfg *tls.Config, token string) *api.Client {
	t.Helper()
	cl, err := api.NewClient(api.Config{Addresses: []string{addr}, Timeout: 10 * time.Second,
		TLS: tlsCfg, Token: token, RetryNoLeaderFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func TestTLS_PlaintextToTLSPortIsRefusedAndChangesNothing(t *testing.T) {
	c, s, cl := secureLeader(t, 1)
	token := c.ManagementToken()
	before := markState(t, s, cl)
	stats := runtimeStats(t, cl)

	// A complete, well-formed write with the management token, in plaintext.
	t.Run("rpc 0x01 with a valid write", func(t *testing.T) {
		conn := dialRaw(t, s.Addr, byte(rpc.ProtoRPC))
		rc := netrpc.NewClientWithCodec(rpc.NewClientCodec(conn))
		req := &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("plaintext")}}
		req.SetToken(token)
		var resp structs.GenericResponse
		done := make(chan error, 1)
		go func() { done <- rc.Call("Volume.Register", req, &resp) }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("plaintext Volume.Register exp: error got: success")
			}
		case <-time.After(15 * time.Second):
			t.Fatal("plaintext Volume.Register exp: connection closed got: no answer in 15s")
		}
		if _, err := expectClosed(conn, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("raft 0x02", func(t *testing.T) {
		// A Raft RPC type byte and some bytes after the protocol byte.
		conn := dialRaw(t, s.Addr, byte(rpc.ProtoRaft), 0x00, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0x07)
		if _, err := expectClosed(conn, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("mux 0x03", func(t *testing.T) {
		// A yamux window-update frame with SYN: what opens a stream.
		conn := dialRaw(t, s.Addr, byte(rpc.ProtoMux), 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0)
		if _, err := expectClosed(conn, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	// Each raw connection counted once, and only those.
	harness.WaitFor(t, 10*time.Second, func() error {
		got := runtimeStats(t, cl).PlaintextRefused - stats.PlaintextRefused
		if got != 3 {
			return fmt.Errorf("PlaintextRefused delta exp: 3 got: %d", got)
		}
		return nil
	})

	// The api client without TLS (yamux, 0x03), with the management token.
	plain := apiClient(t, s.Addr, nil, token)
	if _, err := plain.RegisterVolumes(harness.Ctx(t, 15*time.Second), testVolume("plaintext-api")); err == nil {
		t.Fatal("api client without TLS: RegisterVolumes exp: error got: success")
	} else {
		t.Logf("api client without TLS: %v", err)
	}
	if err := plain.Ping(harness.Ctx(t, 15*time.Second)); err == nil {
		t.Fatal("api client without TLS: Ping exp: error got: success")
	}
	after := runtimeStats(t, cl)
	if got := after.PlaintextRefused - stats.PlaintextRefused; got < 5 {
		t.Fatalf("PlaintextRefused delta after two api calls exp: >= 5 got: %d", got)
	}
	if after.TLSHandshakeFails != stats.TLSHandshakeFails {
		t.Fatalf("TLSHandshakeFails exp: unchanged %d got: %d", stats.TLSHandshakeFails, after.TLSHandshakeFails)
	}
	requireUnchanged(t, s, cl, before)
	// TLS clients are still served.
	if err := s.Client().Ping(harness.Ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("TLS ping after the plaintext attempts: %v", err)
	}
}

func TestTLS_CertificateFromAnotherCAOrExpiredIsRefused(t *testing.T) {
	c, s, cl := secureLeader(t, 1)
	token := c.ManagementToken()
	pki := c.PKI()
	other := harness.NewPKI(t)
	before := markState(t, s, cl)

	cli := roleConfig(t, pki, tlsutil.RoleCLI)
	// The certificate is sent whatever the server asks for: crypto/tls
	// would otherwise leave out one that the server's list of acceptable
	// CAs does not name, and an attacker does not have to be so polite.
	withCert := func(cert tls.Certificate) *tls.Config {
		cfg := cli.Clone()
		cfg.Certificates = nil
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		return cfg
	}
	now := time.Now()

	// Control: a certificate built by handCert and still valid is accepted,
	// so the expired case below fails for its dates and nothing else.
	valid := handCert(t, pki.CA, tlsutil.RoleCLI, now.Add(-time.Hour), now.Add(time.Hour))
	if err := apiClient(t, s.Addr, withCert(valid), token).Ping(harness.Ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("control: valid hand-made cli certificate exp: accepted got: %v", err)
	}

	otherCLI := roleConfig(t, other, tlsutil.RoleCLI)
	cases := []struct {
		name string
		cfg  *tls.Config
	}{
		// Verifying the server is not enough: the server wants a certificate.
		{"no client certificate", func() *tls.Config { cfg := cli.Clone(); cfg.Certificates = nil; return cfg }()},
		// The client trusts the cluster CA; its certificate is from another.
		{"client certificate from another CA", withCert(otherCLI.Certificates[0])},
		// Everything from another CA: the client refuses the server too.
		{"client trusting another CA", otherCLI},
		{"expired client certificate from the cluster CA",
			withCert(handCert(t, pki.CA, tlsutil.RoleCLI, now.Add(-48*time.Hour), now.Add(-24*time.Hour)))},
		{"not yet valid client certificate from the cluster CA",
			withCert(handCert(t, pki.CA, tlsutil.RoleCLI, now.Add(24*time.Hour), now.Add(48*time.Hour)))},
		{"expired server-role certificate from the cluster CA",
			withCert(handCert(t, pki.CA, tlsutil.RoleServer, now.Add(-48*time.Hour), now.Add(-24*time.Hour)))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fails := runtimeStats(t, cl).TLSHandshakeFails
			// A write with the management token: the certificate alone
			// must stop it.
			_, err := apiClient(t, s.Addr, tc.cfg, token).RegisterVolumes(harness.Ctx(t, 15*time.Second), testVolume("bad-cert"))
			if err == nil {
				t.Fatal("RegisterVolumes exp: refused got: success")
			}
			t.Logf("api client: %v", err)
			// On a raw connection: the client refuses the server, or the
			// server answers the client's certificate with an alert and
			// closes the connection.
			tconn, err := dialTLS(t, s.Addr, tc.cfg)
			if err == nil {
				_, _ = tconn.Write([]byte{byte(rpc.ProtoMux)})
				_ = tconn.SetReadDeadline(time.Now().Add(rpc.HandshakeTimeout + 5*time.Second))
				_, err = tconn.Read(make([]byte, 1))
			}
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("raw TLS connection exp: refused for its certificate got: %v", err)
			}
			t.Logf("raw connection: %v", err)
			harness.WaitFor(t, 10*time.Second, func() error {
				if got := runtimeStats(t, cl).TLSHandshakeFails; got < fails+2 {
					return fmt.Errorf("TLSHandshakeFails exp: >= %d got: %d", fails+2, got)
				}
				return nil
			})
		})
	}
	requireUnchanged(t, s, cl, before)
}

// testLogWriter sends a server's log lines to the test log; it ignores
// lines after the test ended.
type testLogWriter struct {
	mu sync.Mutex
	t  testing.TB
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { _ = recover() }()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestTLS_ClientCertificateCannotJoinRaft(t *testing.T) {
	c, leader, cl := secureLeader(t, 3)
	pki := c.PKI()
	before := markState(t, leader, cl)

	// Raw: a complete TLS handshake with a client or cli certificate, then
	// the Raft byte inside TLS.
	for _, role := range []tlsutil.Role{tlsutil.RoleClient, tlsutil.RoleCLI} {
		t.Run("raft byte with a "+string(role)+" certificate", func(t *testing.T) {
			tconn, err := dialTLS(t, leader.Addr, roleConfig(t, pki, role))
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if _, err := tconn.Write([]byte{byte(rpc.ProtoRaft), 0x00}); err != nil {
				t.Fatal(err)
			}
			if _, err := expectClosed(tconn, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Control: with the server certificate the same bytes reach Raft, which
	// keeps the connection open waiting for the rest of its request.
	t.Run("control: raft byte with a server certificate stays open", func(t *testing.T) {
		tconn, err := dialTLS(t, leader.Addr, roleConfig(t, pki, tlsutil.RoleServer))
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		if _, err := tconn.Write([]byte{byte(rpc.ProtoRaft)}); err != nil {
			t.Fatal(err)
		}
		if _, err := expectClosed(tconn, time.Second); err == nil {
			t.Fatal("raft connection with a server certificate exp: handed to Raft (open) got: closed")
		}
	})

	// A whole server started with a client certificate, joining through
	// every member.
	denied := runtimeStats(t, cl).ACLDenied
	l, err := net.Listen("tcp", harness.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	var join []string
	for _, s := range c.Servers {
		join = append(join, s.Addr)
	}
	rogue, err := server.New(server.Config{
		NodeName:       "rogue",
		DataDir:        t.TempDir(),
		Listener:       l,
		Join:           join,
		JoinInterval:   100 * time.Millisecond,
		RaftMultiplier: harness.TestMultiplier,
		TLS:            pki.Configurator(t, tlsutil.RoleClient),
		ACLEnabled:     true,
		Logger:         hclog.New(&hclog.LoggerOptions{Name: "rogue", Level: hclog.Warn, Output: &testLogWriter{t: t}}),
	})
	if err != nil {
		l.Close()
		t.Fatalf("start the server with a client certificate: %v", err)
	}
	t.Cleanup(func() { _ = rogue.Shutdown() })
	rogueID := rogue.ID()

	// It does try: its Hello is refused for want of a server certificate.
	harness.WaitFor(t, 20*time.Second, func() error {
		if got := runtimeStats(t, cl).ACLDenied; got <= denied {
			return fmt.Errorf("ACLDenied on the leader exp: > %d (the rogue's Hello) got: %d", denied, got)
		}
		return nil
	})
	// A negative property needs an observation window: 5 s is 50 join
	// attempts and many election timeouts at test timings.
	attempts := 0
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		for _, s := range c.Servers {
			f := s.Server().Raft().GetConfiguration()
			if err := f.Error(); err != nil {
				t.Fatalf("%s configuration: %v", s.Name, err)
			}
			servers := f.Configuration().Servers
			if len(servers) != 3 {
				t.Fatalf("%s raft members exp: 3 got: %d %+v", s.Name, len(servers), servers)
			}
			for _, m := range servers {
				if string(m.ID) == rogueID || string(m.Address) == l.Addr().String() {
					t.Fatalf("%s raft members exp: without the rogue server got: %+v", s.Name, servers)
				}
			}
		}
		if addr, _ := rogue.Raft().LeaderWithID(); addr != "" {
			t.Fatalf("server with a client certificate exp: no leader known got: %s", addr)
		}
		attempts++
		time.Sleep(50 * time.Millisecond)
	}
	after := runtimeStats(t, cl)
	t.Logf("observed %d times over 5s; ACLDenied on the leader %d -> %d", attempts, denied, after.ACLDenied)
	if after.ACLDenied < denied+5 {
		t.Fatalf("rogue join attempts refused on the leader exp: >= 5 in 5s got: %d", after.ACLDenied-denied)
	}
	requireUnchanged(t, leader, cl, before)
}

// fakeServer is a TLS listener speaking claimd's opening (ProtoTLS, then a
// handshake) with a certificate of the test's choice, that records how
// each handshake ended.
type fakeServer struct {
	addr string
	mu   sync.Mutex
	ok   int
	errs []error
}

func startFakeServer(t *testing.T, cert tls.Certificate, pool *x509.CertPool) *fakeServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{addr: l.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				var b [1]byte
				if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != byte(rpc.ProtoTLS) {
					f.record(fmt.Errorf("first byte exp: 0x04 got: %x %v", b[0], err))
					return
				}
				tc := tls.Server(conn, cfg)
				err := tc.Handshake()
				if err == nil {
					// TLS 1.3: the client verifies the server after the
					// server's side is done; its verdict arrives as an
					// alert, or as the next record.
					_, err = tc.Read(b[:])
				}
				f.record(err)
			}()
		}
	}()
	return f
}

func (f *fakeServer) record(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.ok++
		return
	}
	f.errs = append(f.errs, err)
}

func (f *fakeServer) counts() (ok int, errs []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ok, append([]error(nil), f.errs...)
}

func loadPair(t *testing.T, pki *harness.PKI, role tlsutil.Role) tls.Certificate {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(pki.CertFile[role], pki.KeyFile[role])
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestTLS_ServerNameIsChecked(t *testing.T) {
	// No server needs to run: the listeners are the test's own.
	c := harness.NewCluster(t, 1, harness.Options{})
	pki := c.PKI()
	caPool := x509.NewCertPool()
	caPool.AddCert(pki.CA.Cert)
	// A listener that presents a CLIENT certificate from the cluster CA: a
	// client agent's key used to pose as a server.
	posing := startFakeServer(t, loadPair(t, pki, tlsutil.RoleClient), caPool)
	// Control: the same listener with the server certificate.
	genuine := startFakeServer(t, loadPair(t, pki, tlsutil.RoleServer), caPool)

	dial := func(cfg func() *tls.Config, addr string) error {
		conn, err := rpc.DialProtocol(harness.Ctx(t, 10*time.Second), rpc.TLSDialer(nil, cfg, false), addr, rpc.ProtoMux)
		if err == nil {
			// The client side is done; close so the fake's read ends.
			conn.Close()
		}
		return err
	}

	t.Run("api client", func(t *testing.T) {
		cfg := c.APIConfig(posing.addr, "")
		if cfg.TLS.ServerName != serverName {
			t.Fatalf("api TLS config ServerName exp: %s got: %q", serverName, cfg.TLS.ServerName)
		}
		cl, err := api.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		err = cl.Ping(harness.Ctx(t, 10*time.Second))
		if err == nil || !strings.Contains(err.Error(), serverName) {
			t.Fatalf("api client to a client certificate exp: error naming %s got: %v", serverName, err)
		}
		t.Logf("api client refused: %v", err)
		// Control: the genuine listener passes the name check.
		if err := dial(func() *tls.Config { return cfg.TLS }, genuine.addr); err != nil {
			t.Fatalf("control: api TLS config to a server certificate exp: handshake got: %v", err)
		}
	})

	t.Run("client agent configuration", func(t *testing.T) {
		strict := pki.Configurator(t, tlsutil.RoleClient) // VerifyServerHostname: true
		err := dial(strict.OutgoingConfig, posing.addr)
		if err == nil || !strings.Contains(err.Error(), serverName) {
			t.Fatalf("client agent to a client certificate exp: error naming %s got: %v", serverName, err)
		}
		t.Logf("client agent config refused: %v", err)
		if err := dial(strict.OutgoingConfig, genuine.addr); err != nil {
			t.Fatalf("control: client agent to a server certificate exp: handshake got: %v", err)
		}
		// Without VerifyServerHostname any certificate of the CA passes: the
		// name check is what refused above.
		conf := pki.Config(tlsutil.RoleClient)
		conf.VerifyServerHostname = false
		loose, err := tlsutil.NewConfigurator(conf)
		if err != nil {
			t.Fatal(err)
		}
		if err := dial(loose.OutgoingConfig, posing.addr); err != nil {
			t.Fatalf("control: without VerifyServerHostname exp: handshake got: %v", err)
		}
	})

	t.Run("running client agent", func(t *testing.T) {
		// A listener of its own: only the agent's handshakes are counted.
		posing := startFakeServer(t, loadPair(t, pki, tlsutil.RoleClient), caPool)
		agent := c.StartClient("picky", []string{posing.addr})
		harness.WaitFor(t, 30*time.Second, func() error {
			if _, errs := posing.counts(); len(errs) < 2 {
				return fmt.Errorf("failed handshakes from the agent exp: >= 2 got: %d", len(errs))
			}
			return nil
		})
		agent.Stop()
		ok, errs := posing.counts()
		if ok != 0 {
			t.Fatalf("handshakes the agent completed with a client certificate exp: 0 got: %d", ok)
		}
		// What the fake sees is the agent's bad-certificate alert, or the
		// connection closed under it (the agent closes at once, and
		// unread handshake bytes make that a reset); the reason is
		// checked on the agent's configuration above.
		t.Logf("the agent refused %d times: %v", len(errs), errs[len(errs)-1])
	})
}

// clientHello returns the first flight of a TLS client with cfg: the
// ClientHello record.
func clientHello(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tls.Client(a, cfg).Handshake() }()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

func TestTLS_GarbageAndTruncatedHandshakesAreClosed(t *testing.T) {
	// The servers' handshake bound, shorter than the default so that the
	// stalled openings below are closed after 3 s, not 10.
	const bound = testHandshakeBound
	c, s, cl := secureLeaderWith(t, 1, withHandshakeBound(bound))
	before := markState(t, s, cl)
	stats := runtimeStats(t, cl)
	cli := roleConfig(t, c.PKI(), tlsutil.RoleCLI)
	hello := clientHello(t, cli)

	random := make([]byte, 512)
	_, _ = rand.Read(random)
	random[0] = 0x80 // never a TLS handshake record type (0x16)
	record := append([]byte{0x16, 0x03, 0x01, 0x01, 0x00}, make([]byte, 256)...)
	_, _ = rand.Read(record[5:])

	type result struct {
		name    string
		elapsed time.Duration
		err     error
	}
	type opening struct {
		name    string
		payload []byte // after ProtoTLS
		slow    bool   // only the handshake deadline closes it
	}
	cases := []opening{
		{"nothing", nil, true},
		{"half a ClientHello", hello[:len(hello)/2], true},
		{"random bytes", random, false},
		{"garbage in a handshake record", record, false},
	}
	results := make(chan result, len(cases)+1)
	for _, tc := range cases {
		conn := dialRaw(t, s.Addr, append([]byte{byte(rpc.ProtoTLS)}, tc.payload...)...)
		go func() {
			elapsed, err := expectClosed(conn, bound+5*time.Second)
			results <- result{tc.name, elapsed, err}
		}()
	}
	// A complete handshake, then no protocol byte inside TLS: the same
	// deadline covers it.
	const noInner = "handshake without an inner protocol byte"
	cases = append(cases, opening{name: noInner, slow: true})
	idle, err := dialTLS(t, s.Addr, cli)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	go func() {
		elapsed, err := expectClosed(idle, bound+5*time.Second)
		results <- result{noInner, elapsed, err}
	}()
	// TLS inside TLS, meanwhile.
	tconn, err := dialTLS(t, s.Addr, cli)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if _, err := tconn.Write([]byte{byte(rpc.ProtoTLS)}); err != nil {
		t.Fatal(err)
	}
	if took, err := expectClosed(tconn, bound+5*time.Second); err != nil {
		t.Fatalf("TLS inside TLS: %v", err)
	} else {
		t.Logf("TLS inside TLS: closed after %s", took.Round(time.Millisecond))
	}

	slow := map[string]bool{}
	for _, tc := range cases {
		slow[tc.name] = tc.slow
	}
	for range cases {
		r := <-results
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", r.name, r.err)
		case slow[r.name] && r.elapsed < bound-500*time.Millisecond:
			// Closed, but not by the deadline: something else went wrong.
			t.Errorf("%s exp: closed at the %s handshake deadline got: closed after %s", r.name, bound, r.elapsed)
		default:
			t.Logf("%s: closed after %s", r.name, r.elapsed.Round(time.Millisecond))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// One failed opening per connection: five above and TLS in TLS.
	harness.WaitFor(t, 10*time.Second, func() error {
		st := runtimeStats(t, cl)
		if got := st.TLSHandshakeFails - stats.TLSHandshakeFails; got != 6 {
			return fmt.Errorf("TLSHandshakeFails delta exp: 6 got: %d", got)
		}
		if st.PlaintextRefused != stats.PlaintextRefused {
			return fmt.Errorf("PlaintextRefused exp: unchanged got: %d -> %d", stats.PlaintextRefused, st.PlaintextRefused)
		}
		return nil
	})
	requireUnchanged(t, s, cl, before)
	if err := s.Client().Ping(harness.Ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("ping after the garbage: %v", err)
	}
}

func TestTLS_HandshakeFloodDoesNotExhaustServer(t *testing.T) {
	const (
		flood = 400
		// maxOpening in server/listener.go: connections in their opening
		// (first byte, handshake) at once; each holds one goroutine. One
		// remote address may hold half of them (maxOpeningPerIP).
		maxOpening      = 256
		maxOpeningPerIP = maxOpening / 2
	)
	// The servers' handshake bound, shorter than the default so that the
	// flood's stalled handshakes are closed after 3 s, not 10.
	const bound = testHandshakeBound
	c, s, cl := secureLeaderWith(t, 1, withHandshakeBound(bound))
	before := markState(t, s, cl)
	stats := runtimeStats(t, cl)
	// The goroutine count is the whole test process's (the server runs in
	// it); the baseline is the lowest of a few samples of a quiet server.
	baseline := stats.Goroutines
	for range 5 {
		baseline = min(baseline, runtimeStats(t, cl).Goroutines)
		time.Sleep(20 * time.Millisecond)
	}

	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	start := time.Now()
	// The flood comes from another loopback address than the clients, so
	// the per-address bound shows: it holds half the slots, the rest of
	// its connections are closed at once, and others still get in.
	floodDialer := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range flood {
		conn, err := floodDialer.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatalf("flood dial %d: %v", len(conns), err)
		}
		conns = append(conns, conn)
		// The TLS byte, then silence: a handshake that never starts.
		_, _ = conn.Write([]byte{byte(rpc.ProtoTLS)})
	}
	dialled := time.Since(start)

	// During the flood: the established session keeps answering, the
	// goroutines stay bounded, and a new client gets in once it can.
	fresh := apiClient(t, s.Addr, c.PKI().CLIConfig(t), "")
	peak, refused := 0, 0
	var freshAt time.Duration
	var lastErr error
	deadline := start.Add(bound + 15*time.Second)
	for freshAt == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("new client during the flood exp: connected within %s got: %d refusals, last: %v",
				bound+15*time.Second, refused, lastErr)
		}
		st, err := cl.Runtime(harness.Ctx(t, 5*time.Second))
		if err != nil {
			t.Fatalf("established session during the flood exp: answers got: %v", err)
		}
		peak = max(peak, st.Goroutines)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = fresh.Ping(ctx)
		cancel()
		if err == nil {
			freshAt = time.Since(start)
			break
		}
		refused++
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("flood of %d dialled in %s; goroutines baseline %d peak %d; a new client was refused %d times and connected after %s (last refusal: %v)",
		flood, dialled.Round(time.Millisecond), baseline, peak, refused, freshAt.Round(time.Millisecond), lastErr)
	if peak > baseline+maxOpeningPerIP+64 {
		t.Fatalf("goroutines during the flood exp: <= baseline %d + %d + 64 got: %d", baseline, maxOpeningPerIP, peak)
	}
	if peak < baseline+maxOpeningPerIP/2 {
		t.Fatalf("goroutines during the flood exp: the flood holds opening slots (>= baseline %d + %d) got: %d",
			baseline, maxOpeningPerIP/2, peak)
	}
	// Another address is not shut out by one address's flood.
	if freshAt > bound/2 {
		t.Fatalf("new client from another address exp: connects before the flood's handshakes time out got: after %s", freshAt)
	}
	if err := fresh.Ping(harness.Ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("new client after connecting: %v", err)
	}

	// Every flood connection is closed by the server: at once past the
	// bound, at the handshake deadline within it.
	closeBy := start.Add(dialled + bound + 5*time.Second)
	open := 0
	for i, conn := range conns {
		// At least a second each: past its deadline a read fails at once,
		// even on a connection already closed.
		if _, err := expectClosed(conn, max(time.Until(closeBy), time.Second)); err != nil {
			open++
			t.Errorf("flood connection %d: %v", i, err)
		}
	}
	if open > 0 {
		t.FailNow()
	}
	st := runtimeStats(t, cl)
	timedOut := st.TLSHandshakeFails - stats.TLSHandshakeFails
	t.Logf("all %d flood connections closed %s after the first; handshakes that timed out (TLSHandshakeFails): %d",
		flood, time.Since(start).Round(time.Millisecond), timedOut)
	if timedOut == 0 || timedOut > maxOpeningPerIP {
		t.Fatalf("timed-out handshakes exp: 1..%d (the rest refused at once) got: %d", maxOpeningPerIP, timedOut)
	}
	if got := st.OpeningRefused - stats.OpeningRefused; got < flood-maxOpeningPerIP {
		t.Fatalf("connections refused at once exp: >= %d got: %d", flood-maxOpeningPerIP, got)
	}
	harness.WaitFor(t, 20*time.Second, func() error {
		if g := runtimeStats(t, cl).Goroutines; g > baseline+32 {
			return fmt.Errorf("goroutines after the flood exp: <= baseline %d + 32 got: %d", baseline, g)
		}
		return nil
	})
	requireUnchanged(t, s, cl, before)
}

func TestTLS_ShutdownDoesNotWaitForPendingHandshakes(t *testing.T) {
	c, s, _ := secureLeader(t, 1)
	// One connection that never names its protocol, then one that starts
	// a handshake and goes silent after the server's first flight: both
	// are in their opening when the server stops.
	silent := dialRaw(t, s.Addr)
	midHandshake := dialRaw(t, s.Addr, append([]byte{byte(rpc.ProtoTLS)}, clientHello(t, roleConfig(t, c.PKI(), tlsutil.RoleCLI))...)...)
	// The server answered the ClientHello: it has accepted both (in
	// order) and is waiting for the rest of the handshake.
	_ = midHandshake.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(midHandshake, make([]byte, 5)); err != nil {
		t.Fatalf("ServerHello exp: a record got: %v", err)
	}
	start := time.Now()
	s.Stop()
	took := time.Since(start)
	t.Logf("shutdown with two pending openings took %s", took.Round(time.Millisecond))
	if took > rpc.HandshakeTimeout/2 {
		t.Fatalf("shutdown exp: does not wait for handshake deadlines (%s) got: %s", rpc.HandshakeTimeout, took)
	}
	for _, conn := range []net.Conn{silent, midHandshake} {
		if _, err := expectClosed(conn, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}
