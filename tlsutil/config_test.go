package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTLSConfig_EnabledAndValidate(t *testing.T) {
	cases := []struct {
		name    string
		c       Config
		enabled bool
		errHas  []string // "" none: valid
	}{
		{"plaintext", Config{}, false, nil},
		{"all three", Config{CAFile: "a", CertFile: "b", KeyFile: "c"}, true, nil},
		{"ca only", Config{CAFile: "a"}, true, []string{"-tls-cert-file", "-tls-key-file"}},
		{"no key", Config{CAFile: "a", CertFile: "b"}, true, []string{"-tls-key-file"}},
		{"no ca", Config{CertFile: "b", KeyFile: "c"}, true, []string{"-tls-ca-file"}},
		{"bad region", Config{Region: "Us.East"}, false, []string{`"Us.East"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Enabled(); got != tc.enabled {
				t.Fatalf("Enabled: exp: %v got: %v", tc.enabled, got)
			}
			err := tc.c.Validate()
			if len(tc.errHas) == 0 {
				if err != nil {
					t.Fatalf("exp: valid got: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("exp: error got: nil")
			}
			// The error names only the missing flags first.
			head, _, _ := strings.Cut(err.Error(), "required")
			for _, s := range tc.errHas {
				if !strings.Contains(head, s) {
					t.Fatalf("exp: error naming %s got: %v", s, err)
				}
			}
		})
	}
}

func TestTLS_ServerRoleAcceptedWithVerifyServerHostname(t *testing.T) {
	p := mustNewPKI(t)
	server := p.mustConfigurator(RoleServer, true)
	client := p.mustConfigurator(RoleClient, true)
	s := mustStartServer(t, server.IncomingConfig())

	c := mustDial(t, s.addr, client.OutgoingConfig())
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Fatalf("exp: TLS 1.3 got: %x", v)
	}
	if got := PeerRole(c.ConnectionState(), client.Region()); got != RoleServer {
		t.Fatalf("client sees: exp: %q got: %q", RoleServer, got)
	}
	if got := PeerRole(s.nextState(t), server.Region()); got != RoleClient {
		t.Fatalf("server sees: exp: %q got: %q", RoleClient, got)
	}
}

func TestTLS_VerifyServerHostnameRefusesClientRoleAsServer(t *testing.T) {
	p := mustNewPKI(t)
	// A client agent's certificate is signed by the same CA; only the name
	// check stops it from answering as a server.
	impostor := p.mustConfigurator(RoleClient, false)
	s := mustStartServer(t, impostor.IncomingConfig())

	verifying := p.mustConfigurator(RoleClient, true)
	_, err := dial(t, s.addr, verifying.OutgoingConfig())
	if err == nil || !strings.Contains(err.Error(), Name(RoleServer, DefaultRegion)) {
		t.Fatalf("exp: refused for want of %s got: %v", Name(RoleServer, DefaultRegion), err)
	}
	s.nextErr(t)

	// Chain-only mode accepts it: the chain is all it checks.
	chainOnly := p.mustConfigurator(RoleClient, false)
	mustDial(t, s.addr, chainOnly.OutgoingConfig())
}

// A server's certificate from another CA (or expired) is refused by an
// outgoing config in both modes; a client's is refused by the incoming one.
func TestTLS_OtherCAAndExpiredCertsRefused(t *testing.T) {
	p := mustNewPKI(t)
	other := mustNewPKI(t)
	otherServer := other.mustKeyPair(RoleServer, "")
	expiredServer := p.mustExpiredKeyPair(RoleServer)
	otherClient := other.mustKeyPair(RoleClient, "")
	expiredClient := p.mustExpiredKeyPair(RoleClient)

	for _, tc := range []struct {
		name string
		cert tls.Certificate
	}{{"other CA", otherServer}, {"expired", expiredServer}} {
		for _, verify := range []bool{true, false} {
			t.Run(fmt.Sprintf("server cert %s VerifyServerHostname=%v", tc.name, verify), func(t *testing.T) {
				s := mustStartServer(t, rawServerConfig(tc.cert))
				client := p.mustConfigurator(RoleClient, verify)
				_, err := dial(t, s.addr, client.OutgoingConfig())
				if err == nil || !strings.Contains(err.Error(), "server certificate") {
					t.Fatalf("exp: client refuses got: %v", err)
				}
			})
		}
	}
	for _, tc := range []struct {
		name, want string
		cert       tls.Certificate
	}{{"other CA", "unknown authority", otherClient}, {"expired", "expired", expiredClient}} {
		t.Run("client cert "+tc.name, func(t *testing.T) {
			server := p.mustConfigurator(RoleServer, true)
			s := mustStartServer(t, server.IncomingConfig())
			if _, err := dial(t, s.addr, rawClientConfig(tc.cert)); err == nil {
				t.Fatal("exp: refused got: accepted")
			}
			if err := s.nextErr(t); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exp: server refuses with %q got: %v", tc.want, err)
			}
		})
	}
	t.Run("no client cert", func(t *testing.T) {
		server := p.mustConfigurator(RoleServer, true)
		s := mustStartServer(t, server.IncomingConfig())
		if _, err := dial(t, s.addr, rawClientConfig()); err == nil {
			t.Fatal("exp: refused got: accepted")
		}
		s.nextErr(t)
	})
}

func TestTLS_TLS12ClientRefused(t *testing.T) {
	p := mustNewPKI(t)
	server := p.mustConfigurator(RoleServer, true)
	s := mustStartServer(t, server.IncomingConfig())
	cfg := rawClientConfig(p.mustKeyPair(RoleClient, ""))
	cfg.MaxVersion = tls.VersionTLS12
	_, err := dial(t, s.addr, cfg)
	if err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("exp: protocol version refused got: %v", err)
	}
	s.nextErr(t)
}

func TestPeerRole_FromHandshake(t *testing.T) {
	p := mustNewPKI(t)
	server := p.mustConfigurator(RoleServer, true)
	s := mustStartServer(t, server.IncomingConfig())
	for _, tc := range []struct {
		role, region string
		exp          Role
	}{
		{"server", "", RoleServer},
		{"client", "", RoleClient},
		{"cli", "", RoleCLI},
		{"server", "east", RoleNone}, // another region's name
	} {
		t.Run(tc.role+"/"+tc.region, func(t *testing.T) {
			cert := p.mustKeyPair(Role(tc.role), tc.region)
			mustDial(t, s.addr, rawClientConfig(cert))
			if got := PeerRole(s.nextState(t), server.Region()); got != tc.exp {
				t.Fatalf("exp: %q got: %q", tc.exp, got)
			}
		})
	}
}

func TestPeerRole_Names(t *testing.T) {
	state := func(names ...string) tls.ConnectionState {
		return tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{{DNSNames: names}}}
	}
	for _, tc := range []struct {
		name   string
		cs     tls.ConnectionState
		region string
		exp    Role
	}{
		{"plaintext", tls.ConnectionState{}, "", RoleNone},
		{"server", state("localhost", "server.global.claimd"), "", RoleServer},
		{"case", state("SERVER.Global.claimd"), "global", RoleServer},
		{"cli in region", state("cli.east.claimd"), "east", RoleCLI},
		{"other region", state("server.east.claimd"), "global", RoleNone},
		{"no role name", state("localhost", "db.example.com"), "", RoleNone},
		{"same role twice", state("client.global.claimd", "client.global.claimd"), "", RoleClient},
		{"ambiguous", state("cli.global.claimd", "server.global.claimd"), "", RoleNone},
		{"other region ignored", state("client.global.claimd", "server.east.claimd"), "", RoleClient},
		{"incomplete", tls.ConnectionState{PeerCertificates: state("server.global.claimd").PeerCertificates}, "", RoleNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PeerRole(tc.cs, tc.region); got != tc.exp {
				t.Fatalf("exp: %q got: %q", tc.exp, got)
			}
		})
	}
}

func TestNewConfigurator_CertErrorsNameTheFile(t *testing.T) {
	p := mustNewPKI(t)
	other := mustNewPKI(t)
	certFile, keyFile := p.mustCert(RoleServer, "")
	_, otherKey := p.mustCert(RoleServer, "")
	otherCert, otherCertKey := other.mustCert(RoleServer, "")
	expiredCert, expiredKey := p.mustExpiredCert(RoleServer)
	garbage := filepath.Join(p.dir, "garbage.pem")
	mustWrite(t, garbage, []byte("not a pem file\n"), 0o644)
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	badKey := filepath.Join(p.dir, "bad-key.pem")
	mustWrite(t, badKey, []byte(strings.Replace(string(keyPEM), "\n", "\nAAAA", 2)), 0o600)
	leafAsCA := certFile // a leaf certificate in the CA file

	for _, tc := range []struct {
		name       string
		c          Config
		file, want string
	}{
		{"missing cert", Config{CAFile: p.caFile, CertFile: filepath.Join(p.dir, "nope.pem"), KeyFile: keyFile}, "nope.pem", "no such file"},
		{"garbage cert", Config{CAFile: p.caFile, CertFile: garbage, KeyFile: keyFile}, garbage, "no certificate found"},
		{"garbage ca", Config{CAFile: garbage, CertFile: certFile, KeyFile: keyFile}, garbage, "no certificate found"},
		{"leaf as ca", Config{CAFile: leafAsCA, CertFile: certFile, KeyFile: keyFile}, leafAsCA, "not a CA"},
		{"garbage key", Config{CAFile: p.caFile, CertFile: certFile, KeyFile: garbage}, garbage, "no private key found"},
		{"unparsable key", Config{CAFile: p.caFile, CertFile: certFile, KeyFile: badKey}, badKey, "cannot parse"},
		{"swapped", Config{CAFile: p.caFile, CertFile: keyFile, KeyFile: certFile}, keyFile, "swapped"},
		{"key of another cert", Config{CAFile: p.caFile, CertFile: certFile, KeyFile: otherKey}, otherKey, "key does not match certificate"},
		{"other CA", Config{CAFile: p.caFile, CertFile: otherCert, KeyFile: otherCertKey}, otherCert, "unknown authority"},
		{"expired", Config{CAFile: p.caFile, CertFile: expiredCert, KeyFile: expiredKey}, expiredCert, "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewConfigurator(tc.c)
			if err == nil {
				t.Fatal("exp: error got: nil")
			}
			if !strings.Contains(err.Error(), tc.file) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exp: error naming %s and %q got: %v", tc.file, tc.want, err)
			}
			assertNoKeyMaterial(t, err, p.dir)
		})
	}
}

// assertNoKeyMaterial fails if err shows a PEM key header or any line of a
// key file in dir.
func assertNoKeyMaterial(t *testing.T, err error, dir string) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "PRIVATE KEY") {
		t.Fatalf("error shows key material: %v", err)
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "*key*.pem"))
	for _, k := range keys {
		data, rerr := os.ReadFile(k)
		if rerr != nil {
			t.Fatal(rerr)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") && strings.Contains(msg, line) {
				t.Fatalf("error shows a line of %s: %v", k, err)
			}
		}
	}
}

func TestTLSNewConfigurator_DisabledOrIncomplete(t *testing.T) {
	if _, err := NewConfigurator(Config{}); err == nil {
		t.Fatal("exp: error for a Config with no files got: nil")
	}
	if _, err := NewConfigurator(Config{CAFile: "x"}); err == nil || !strings.Contains(err.Error(), "-tls-cert-file") {
		t.Fatalf("exp: error naming -tls-cert-file got: %v", err)
	}
}

func TestTLSClientConfigFromFiles_CLICert(t *testing.T) {
	p := mustNewPKI(t)
	server := p.mustConfigurator(RoleServer, true)
	s := mustStartServer(t, server.IncomingConfig())
	certFile, keyFile := p.mustCert(RoleCLI, "")

	cfg, err := ClientConfigFromFiles(p.caFile, certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	mustDial(t, s.addr, cfg)
	if got := PeerRole(s.nextState(t), server.Region()); got != RoleCLI {
		t.Fatalf("exp: %q got: %q", RoleCLI, got)
	}
}

func TestTLSClientConfigFromFiles_VerifiesServerName(t *testing.T) {
	p := mustNewPKI(t)
	impostor := p.mustKeyPair(RoleClient, "")
	s := mustStartServer(t, rawServerConfig(impostor))
	cfg, err := ClientConfigFromFiles(p.caFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = dial(t, s.addr, cfg)
	if err == nil || !strings.Contains(err.Error(), Name(RoleServer, DefaultRegion)) {
		t.Fatalf("exp: refused for want of %s got: %v", Name(RoleServer, DefaultRegion), err)
	}
}

func TestTLSClientConfigFromFiles_Errors(t *testing.T) {
	p := mustNewPKI(t)
	certFile, keyFile := p.mustCert(RoleCLI, "")
	for _, tc := range []struct {
		name                string
		ca, cert, key, want string
	}{
		{"no ca", "", certFile, keyFile, "-ca-cert"},
		{"cert without key", p.caFile, certFile, "", "-client-key"},
		{"key without cert", p.caFile, "", keyFile, "-client-cert"},
		{"swapped", p.caFile, keyFile, certFile, "client-cert " + keyFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ClientConfigFromFiles(tc.ca, tc.cert, tc.key, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exp: error with %q got: %v", tc.want, err)
			}
			assertNoKeyMaterial(t, err, p.dir)
		})
	}
}
