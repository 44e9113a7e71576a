package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimd/claimd/tlsutil"
)

// apiRequest is a request addressed as a client on this machine addresses
// the API (by IP; httptest's default Host, example.com, is a name the
// plain-HTTP API refuses).
func apiRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "127.0.0.1:4646"
	return r
}

// Over plain HTTP the API answers only requests addressed to an IP
// address, localhost, this machine's name or a name the operator allowed:
// a page that rebinds its own domain to the agent's address still sends
// that domain as Host and is refused, for reads as for writes, before any
// route runs.
func TestPlainHTTP_OnlyRequestsAddressedToThisAgentsNamesAreServed(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0", RPCAddrs: []string{"127.0.0.1:1"}, AllowedHosts: []string{"claimd.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	hostname, _ := os.Hostname()
	cases := []struct {
		host   string
		served bool
	}{
		{"127.0.0.1:4646", true},
		{"10.1.2.3", true},
		{"[::1]:4646", true},
		{"localhost:4646", true},
		{"LocalHost.", true},
		{hostname + ":4646", hostname != ""},
		{"claimd.internal:4646", true},
		{"CLAIMD.INTERNAL", true},
		{"", true}, // HTTP/1.0 without Host: not a browser
		{"rebind.attacker.example:4646", false},
		{"attacker.example", false},
		{"localhost.attacker.example", false},
		{"claimd.internal.attacker.example", false},
	}
	for _, c := range cases {
		for _, method := range []string{"GET", "PUT"} {
			r := httptest.NewRequest(method, "/v1/agent/self", strings.NewReader(""))
			r.Host = c.host
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			refused := w.Code == http.StatusForbidden && strings.Contains(w.Body.String(), "DNS rebinding")
			if refused == c.served {
				t.Errorf("%s Host %q exp: served %v got: %d %s", method, c.host, c.served, w.Code, w.Body.String())
			}
			if refused && !strings.Contains(w.Body.String(), "-http-allowed-hosts") {
				t.Errorf("%s Host %q: the refusal should say how to allow a name, got: %s", method, c.host, w.Body.String())
			}
		}
	}
}

// With TLS the names are not checked: the agent's certificate already
// decides which names a browser may use, and any name in it keeps working.
func TestTLS_HostIsNotChecked(t *testing.T) {
	ca, err := tlsutil.GenerateCA(1)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := tlsutil.GenerateCert(ca, tlsutil.CertRequest{Role: tlsutil.RoleClient, Days: 1, DNSNames: []string{"claimd.example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": ca.CertPEM, "cert.pem": certPEM, "key.pem": keyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf, err := tlsutil.NewConfigurator(tlsutil.Config{CAFile: filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Addr: "127.0.0.1:0", RPCAddrs: []string{"127.0.0.1:1"}, TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	for _, h := range []string{"claimd.example.org:4646", "attacker.example", "127.0.0.1"} {
		if !s.hostAllowed(h) {
			t.Errorf("Host %q with TLS exp: allowed got: refused", h)
		}
	}
}
