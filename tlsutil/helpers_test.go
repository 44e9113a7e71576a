package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testTimeout bounds every network step of a test; nothing waits longer.
const testTimeout = 10 * time.Second

// testPKI is a CA and a directory to write its certificates in.
type testPKI struct {
	t      *testing.T
	dir    string
	ca     *CA
	caFile string
	n      int // files written, for unique names
}

func mustNewPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := GenerateCA(1)
	if err != nil {
		t.Fatalf("GenerateCA: %v", err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	p.caFile = filepath.Join(p.dir, "ca.pem")
	mustWrite(t, p.caFile, ca.CertPEM, 0o644)
	return p
}

// mustCert writes a fresh certificate and key for role and returns their
// paths.
func (p *testPKI) mustCert(role Role, region string) (certFile, keyFile string) {
	p.t.Helper()
	certPEM, keyPEM, err := GenerateCert(p.ca, CertRequest{Role: role, Region: region, Days: 1})
	if err != nil {
		p.t.Fatalf("GenerateCert(%s): %v", role, err)
	}
	return p.writePair(certPEM, keyPEM)
}

// mustExpiredCert writes a certificate for role that expired an hour ago.
func (p *testPKI) mustExpiredCert(role Role) (certFile, keyFile string) {
	p.t.Helper()
	now := time.Now()
	certPEM, keyPEM, err := generateCert(p.ca, CertRequest{Role: role, Days: 1}, now.Add(-48*time.Hour), now.Add(-time.Hour))
	if err != nil {
		p.t.Fatalf("generateCert(%s, expired): %v", role, err)
	}
	return p.writePair(certPEM, keyPEM)
}

// mustKeyPair is mustCert loaded for a raw tls.Config.
func (p *testPKI) mustKeyPair(role Role, region string) tls.Certificate {
	p.t.Helper()
	certFile, keyFile := p.mustCert(role, region)
	return mustKeyPair(p.t, certFile, keyFile)
}

func (p *testPKI) mustExpiredKeyPair(role Role) tls.Certificate {
	p.t.Helper()
	certFile, keyFile := p.mustExpiredCert(role)
	return mustKeyPair(p.t, certFile, keyFile)
}

func (p *testPKI) writePair(certPEM, keyPEM []byte) (certFile, keyFile string) {
	p.t.Helper()
	p.n++
	certFile = filepath.Join(p.dir, fmt.Sprintf("cert%d.pem", p.n))
	keyFile = filepath.Join(p.dir, fmt.Sprintf("cert%d-key.pem", p.n))
	mustWrite(p.t, certFile, certPEM, 0o644)
	mustWrite(p.t, keyFile, keyPEM, 0o600)
	return certFile, keyFile
}

// config is an agent Config holding a fresh certificate for role and its
// own copy of the CA file, so that a test can rewrite one agent's files.
func (p *testPKI) config(role Role, verifyServerHostname bool) Config {
	p.t.Helper()
	certFile, keyFile := p.mustCert(role, "")
	caFile := strings.TrimSuffix(certFile, ".pem") + "-ca.pem"
	mustWrite(p.t, caFile, p.ca.CertPEM, 0o644)
	return Config{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, VerifyServerHostname: verifyServerHostname}
}

func (p *testPKI) mustConfigurator(role Role, verifyServerHostname bool) *Configurator {
	p.t.Helper()
	return mustNewConfigurator(p.t, p.config(role, verifyServerHostname))
}

func mustNewConfigurator(t *testing.T, c Config) *Configurator {
	t.Helper()
	cfg, err := NewConfigurator(c)
	if err != nil {
		t.Fatalf("NewConfigurator: %v", err)
	}
	return cfg
}

func mustWrite(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

func mustKeyPair(t *testing.T, certFile, keyFile string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustParseCertFile(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", file)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawServerConfig presents cert and asks for, but does not verify, a client
// certificate: a peer that is not built with this package.
func rawServerConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
}

// rawClientConfig trusts any server and presents cert, if given, even when
// the server's list of acceptable CAs does not name its issuer (a client
// choosing from Certificates would send nothing, and the test would check
// the wrong refusal).
func rawClientConfig(cert ...tls.Certificate) *tls.Config {
	return &tls.Config{
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if len(cert) == 0 {
				return &tls.Certificate{}, nil
			}
			return &cert[0], nil
		},
	}
}

// testServer accepts TLS connections on loopback and echoes what it reads.
type testServer struct {
	addr   string
	states chan tls.ConnectionState // one per successful handshake
	errs   chan error               // one per failed handshake
}

func mustStartServer(t *testing.T, cfg *tls.Config) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{addr: ln.Addr().String(), states: make(chan tls.ConnectionState, 64), errs: make(chan error, 64)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				tc := tls.Server(c, cfg)
				tc.SetDeadline(time.Now().Add(testTimeout))
				if err := tc.Handshake(); err != nil {
					s.errs <- err
					return
				}
				tc.SetDeadline(time.Time{})
				s.states <- tc.ConnectionState()
				io.Copy(tc, tc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *testServer) nextState(t *testing.T) tls.ConnectionState {
	t.Helper()
	select {
	case cs := <-s.states:
		return cs
	case err := <-s.errs:
		t.Fatalf("server handshake: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("no server handshake")
	}
	return tls.ConnectionState{}
}

func (s *testServer) nextErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.errs:
		return err
	case <-s.states:
		t.Fatal("exp: server refuses the handshake, got: accepted")
	case <-time.After(testTimeout):
		t.Fatal("no server handshake")
	}
	return nil
}

// dial connects and completes the handshake and one echo round trip: in TLS
// 1.3 the client's handshake returns before the server has checked the
// client's certificate, so a refusal shows only at the first read. Safe to
// call from any goroutine.
func dial(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, cfg)
	c.SetDeadline(time.Now().Add(testTimeout))
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	if err := roundTrip(c); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func mustDial(t *testing.T, addr string, cfg *tls.Config) *tls.Conn {
	t.Helper()
	c, err := dial(t, addr, cfg)
	if err != nil {
		t.Fatalf("exp: connection accepted, got: %v", err)
	}
	return c
}

// roundTrip writes a message and reads the echo.
func roundTrip(c *tls.Conn) error {
	c.SetDeadline(time.Now().Add(testTimeout))
	defer c.SetDeadline(time.Time{})
	msg := []byte("ping")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != string(msg) {
		return errors.New("echo: got " + string(got))
	}
	return nil
}
