package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/claimd/claimd/tlsutil"
)

// runCLI runs one claimd command line and returns its exit code and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// mustRunCLI runs a command line that must succeed.
func mustRunCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(args...)
	if code != 0 {
		t.Fatalf("claimd %s: exp: exit 0 got: %d, stderr: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// mustCreateCA runs `tls ca create` in a new directory and returns it.
func mustCreateCA(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out := mustRunCLI(t, "tls", "ca", "create", "-dir", dir)
	for _, f := range []string{caCertFileName, caKeyFileName} {
		if want := "==> wrote " + filepath.Join(dir, f); !strings.Contains(out, want) {
			t.Fatalf("exp: %q got: %q", want, out)
		}
	}
	return dir
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Fatalf("%s: exp: mode %o got: %o", path, want, got)
	}
}

func mustReadCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: exp: CERTIFICATE PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTLSCACreate_WritesFilesAndRefusesOverwrite(t *testing.T) {
	dir := mustCreateCA(t)
	certPath, keyPath := filepath.Join(dir, caCertFileName), filepath.Join(dir, caKeyFileName)
	assertMode(t, certPath, 0o644)
	assertMode(t, keyPath, 0o600)
	ca, err := tlsutil.LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if !ca.Cert.IsCA {
		t.Fatal("exp: a CA certificate")
	}
	before, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}

	code, _, errOut := runCLI("tls", "ca", "create", "-dir", dir)
	if code != 1 || !strings.Contains(errOut, certPath) || !strings.Contains(errOut, "already exists") {
		t.Fatalf("exp: exit 1 naming %s got: %d %q", certPath, code, errOut)
	}
	after, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("exp: CA key untouched got: rewritten")
	}

	// The key alone left behind is also refused.
	if err := os.Remove(certPath); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI("tls", "ca", "create", "-dir", dir)
	if code != 1 || !strings.Contains(errOut, keyPath) {
		t.Fatalf("exp: exit 1 naming %s got: %d %q", keyPath, code, errOut)
	}
	if _, err := os.Stat(certPath); !os.IsNotExist(err) {
		t.Fatalf("exp: no CA certificate written got: %v", err)
	}
}

func TestTLSCertCreate_EachRole(t *testing.T) {
	caDir := mustCreateCA(t)
	caCert := filepath.Join(caDir, caCertFileName)
	caKey := filepath.Join(caDir, caKeyFileName)
	ca, err := tlsutil.LoadCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)

	for _, tc := range []struct {
		flag, region, base string
		dns, ips           []string
	}{
		{"-server", "", "global-server-claimd", []string{"server.global.claimd", "localhost", "claimd1.example.com"}, []string{"127.0.0.1", "10.0.0.7"}},
		{"-client", "east", "east-client-claimd", []string{"client.east.claimd", "localhost", "claimd1.example.com"}, []string{"127.0.0.1", "10.0.0.7"}},
		{"-cli", "", "global-cli-claimd", []string{"cli.global.claimd", "claimd1.example.com"}, []string{"10.0.0.7"}},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"tls", "cert", "create", tc.flag, "-ca", caCert, "-key", caKey, "-dir", dir,
				"-additional-dnsname", "claimd1.example.com", "-additional-ipaddress", "10.0.0.7"}
			if tc.region != "" {
				args = append(args, "-region", tc.region)
			}
			out := mustRunCLI(t, args...)
			certPath := filepath.Join(dir, tc.base+".pem")
			keyPath := filepath.Join(dir, tc.base+"-key.pem")
			if !strings.Contains(out, "==> wrote "+certPath) || !strings.Contains(out, "==> wrote "+keyPath) {
				t.Fatalf("exp: wrote %s and %s got: %q", certPath, keyPath, out)
			}
			assertMode(t, certPath, 0o644)
			assertMode(t, keyPath, 0o600)
			c := mustReadCert(t, certPath)
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
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Fatalf("exp: signed by the CA got: %v", err)
			}
			// The pair works as an agent's: the files load and match.
			if _, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: caCert, CertFile: certPath, KeyFile: keyPath, Region: tc.region}); err != nil {
				t.Fatalf("NewConfigurator with the written files: %v", err)
			}
		})
	}
}

func TestTLSCertCreate_NumbersFurtherCerts(t *testing.T) {
	dir := mustCreateCA(t)
	caCert := filepath.Join(dir, caCertFileName)
	caKey := filepath.Join(dir, caKeyFileName)
	var serials []string
	for _, name := range []string{"global-server-claimd", "global-server-claimd-1", "global-server-claimd-2"} {
		out := mustRunCLI(t, "tls", "cert", "create", "-server", "-ca", caCert, "-key", caKey, "-dir", dir)
		certPath := filepath.Join(dir, name+".pem")
		if !strings.Contains(out, "==> wrote "+certPath+"\n") {
			t.Fatalf("exp: wrote %s got: %q", certPath, out)
		}
		assertMode(t, filepath.Join(dir, name+"-key.pem"), 0o600)
		serials = append(serials, mustReadCert(t, certPath).SerialNumber.String())
	}
	if serials[0] == serials[1] || serials[1] == serials[2] {
		t.Fatalf("exp: three certificates got: serials %v", serials)
	}
}

func TestTLSCertCreate_DefaultCAFilesInWorkingDirectory(t *testing.T) {
	dir := mustCreateCA(t)
	t.Chdir(dir)
	mustRunCLI(t, "tls", "cert", "create", "-cli")
	if _, err := os.Stat(filepath.Join(dir, "global-cli-claimd.pem")); err != nil {
		t.Fatalf("exp: global-cli-claimd.pem in the working directory got: %v", err)
	}
}

func TestTLSCertCreate_Errors(t *testing.T) {
	dir := mustCreateCA(t)
	caCert := filepath.Join(dir, caCertFileName)
	caKey := filepath.Join(dir, caKeyFileName)
	common := []string{"-ca", caCert, "-key", caKey, "-dir", dir}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no role", nil, "exactly one of -server, -client or -cli"},
		{"two roles", []string{"-server", "-cli"}, "exactly one of -server, -client or -cli"},
		{"bad ip", []string{"-server", "-additional-ipaddress", "10.0.0.300"}, "10.0.0.300"},
		{"role name as extra", []string{"-cli", "-additional-dnsname", "server.global.claimd"}, "role name"},
		{"missing CA", []string{"-server", "-ca", filepath.Join(dir, "nope.pem")}, "nope.pem"},
		{"bad region", []string{"-server", "-region", "East"}, "region"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"tls", "cert", "create"}, common...)
			code, _, errOut := runCLI(append(args, tc.args...)...)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exp: exit 1 with %q got: %d %q", tc.want, code, errOut)
			}
			if strings.Contains(errOut, "PRIVATE KEY") {
				t.Fatalf("exp: no key material got: %q", errOut)
			}
		})
	}
	// Nothing was written by the failures.
	matches, _ := filepath.Glob(filepath.Join(dir, "*-claimd*.pem"))
	if len(matches) != 0 {
		t.Fatalf("exp: no certificates written got: %v", matches)
	}
}
