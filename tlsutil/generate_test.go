package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGenerateCA_Properties(t *testing.T) {
	ca, err := GenerateCA(1825)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Fatalf("exp: CA with path length 0 got: IsCA=%v MaxPathLen=%d zero=%v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	}
	want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	if c.KeyUsage != want {
		t.Fatalf("KeyUsage: exp: %b got: %b", want, c.KeyUsage)
	}
	if !strings.HasPrefix(c.Subject.CommonName, "claimd CA ") {
		t.Fatalf("CommonName: exp: claimd CA … got: %q", c.Subject.CommonName)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("exp: ECDSA P-256 key got: %T", c.PublicKey)
	}
	if d := time.Until(c.NotAfter); d < 1824*24*time.Hour || d > 1825*24*time.Hour {
		t.Fatalf("NotAfter: exp: 1825 days from now got: %v", c.NotAfter)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Fatalf("exp: self-signed got: %v", err)
	}
	other, err := GenerateCA(1)
	if err != nil {
		t.Fatal(err)
	}
	if other.Cert.SerialNumber.Cmp(c.SerialNumber) == 0 || other.Cert.Subject.CommonName == c.Subject.CommonName {
		t.Fatal("exp: two CAs differ in serial and name got: the same")
	}
	if b, _ := pem.Decode(ca.KeyPEM); b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("exp: PKCS#8 key PEM got: %q", ca.KeyPEM[:min(30, len(ca.KeyPEM))])
	}
	if _, err := GenerateCA(0); err == nil {
		t.Fatal("exp: error for 0 days got: nil")
	}
}

func TestGenerateCert_SANsPerRole(t *testing.T) {
	ca, err := GenerateCA(30)
	if err != nil {
		t.Fatal(err)
	}
	extraIP := net.ParseIP("10.0.0.1")
	for _, tc := range []struct {
		role   Role
		region string
		dns    []string
		ips    []string
		cn     string
	}{
		{RoleServer, "", []string{"server.global.claimd", "localhost", "claimd.example.com"}, []string{"127.0.0.1", "10.0.0.1"}, "server.global.claimd"},
		{RoleClient, "east", []string{"client.east.claimd", "localhost", "claimd.example.com"}, []string{"127.0.0.1", "10.0.0.1"}, "client.east.claimd"},
		{RoleCLI, "", []string{"cli.global.claimd", "claimd.example.com", "localhost"}, []string{"10.0.0.1"}, "cli.global.claimd"},
	} {
		t.Run(string(tc.role), func(t *testing.T) {
			certPEM, keyPEM, err := GenerateCert(ca, CertRequest{
				Role: tc.role, Region: tc.region, Days: 10,
				DNSNames:    []string{"claimd.example.com", "localhost"}, // localhost: a default again is not repeated; asked for by cli it is added
				IPAddresses: []net.IP{extraIP},
			})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := pem.Decode(certPEM)
			if b == nil || b.Type != "CERTIFICATE" {
				t.Fatal("exp: CERTIFICATE PEM")
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.DNSNames, tc.dns) {
				t.Fatalf("DNS SANs: exp: %v got: %v", tc.dns, c.DNSNames)
			}
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tc.ips) {
				t.Fatalf("IP SANs: exp: %v got: %v", tc.ips, ips)
			}
			if c.Subject.CommonName != tc.cn || c.IsCA {
				t.Fatalf("exp: leaf named %s got: %q IsCA=%v", tc.cn, c.Subject.CommonName, c.IsCA)
			}
			if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
				t.Fatalf("ExtKeyUsage: exp: ServerAuth, ClientAuth got: %v", c.ExtKeyUsage)
			}
			if d := time.Until(c.NotAfter); d < 9*24*time.Hour || d > 10*24*time.Hour {
				t.Fatalf("NotAfter: exp: 10 days from now got: %v", c.NotAfter)
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca.Cert)
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.cn, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Fatalf("exp: chains to the CA got: %v", err)
			}
			kb, _ := pem.Decode(keyPEM)
			if kb == nil || kb.Type != "PRIVATE KEY" {
				t.Fatal("exp: PKCS#8 PRIVATE KEY PEM")
			}
			key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if k, ok := key.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() || !k.PublicKey.Equal(c.PublicKey) {
				t.Fatal("exp: the certificate's P-256 key")
			}
		})
	}
}

func TestGenerateCert_RefusesBadRequests(t *testing.T) {
	ca, err := GenerateCA(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  CertRequest
		want string
	}{
		{"no role", CertRequest{Days: 1}, "role"},
		{"unknown role", CertRequest{Role: "admin", Days: 1}, "role"},
		{"no days", CertRequest{Role: RoleServer}, "days"},
		{"bad region", CertRequest{Role: RoleServer, Days: 1, Region: "a.b"}, "region"},
		{"second role name", CertRequest{Role: RoleCLI, Days: 1, DNSNames: []string{"server.global.claimd"}}, "role name"},
		{"role name of another region", CertRequest{Role: RoleClient, Days: 1, DNSNames: []string{"Server.East.claimd"}}, "role name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := GenerateCert(ca, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exp: error about %s got: %v", tc.want, err)
			}
		})
	}
}

func TestGenerateCert_NeverOutlivesCA(t *testing.T) {
	ca, err := GenerateCA(2)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := GenerateCert(ca, CertRequest{Role: RoleServer, Days: 365})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !c.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("NotAfter: exp: the CA's %v got: %v", ca.Cert.NotAfter, c.NotAfter)
	}
}

func TestLoadCA_RoundTripAndErrors(t *testing.T) {
	dir := t.TempDir()
	ca, err := GenerateCA(1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateCA(1)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	otherKey := filepath.Join(dir, "other-key.pem")
	mustWrite(t, certFile, ca.CertPEM, 0o644)
	mustWrite(t, keyFile, ca.KeyPEM, 0o600)
	mustWrite(t, otherKey, other.KeyPEM, 0o600)

	loaded, err := LoadCA(certFile, keyFile)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !loaded.Key.Equal(ca.Key) {
		t.Fatal("exp: the CA written got: another")
	}
	// A certificate signed by the loaded CA chains to the original.
	certPEM, _, err := GenerateCert(loaded, CertRequest{Role: RoleServer, Days: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatalf("exp: signed by the CA got: %v", err)
	}

	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"other key", certFile, otherKey, "ca-key " + otherKey + ": key does not match"},
		{"swapped", keyFile, certFile, "ca " + keyFile + ": no certificate found"},
		{"missing", filepath.Join(dir, "nope.pem"), keyFile, "nope.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCA(tc.cert, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exp: %q got: %v", tc.want, err)
			}
			assertNoKeyMaterial(t, err, dir)
		})
	}
}
