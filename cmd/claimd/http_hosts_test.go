package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startPlainAgent starts a -dev -dev-insecure agent (plain HTTP, no ACLs)
// with extra flags; the caller stops it.
func startPlainAgent(t *testing.T, extra ...string) (*agent, string, error) {
	t.Helper()
	httpAddr := freeAddr(t)
	a, _, _, err := startTestAgent(t, append([]string{"-dev", "-dev-insecure", "-data-dir", t.TempDir(), "-bind", freeAddr(t),
		"-http-addr", httpAddr, "-raft-multiplier", "0.2"}, extra...)...)
	return a, httpAddr, err
}

// An agent serving plain HTTP answers a request addressed to its IP
// address, localhost or a name given with -http-allowed-hosts, and refuses
// one addressed to any other name (a DNS-rebinding page's), for reads as
// for writes; a name given with a port is refused at start, naming the flag.
func TestAgent_PlainHTTPAnswersOnlyItsOwnNames(t *testing.T) {
	a, httpAddr, err := startPlainAgent(t, "-http-allowed-hosts", "claimd.internal")
	defer a.stop()
	if err != nil {
		t.Fatalf("agent exp: started got: %v", err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	_, port, _ := strings.Cut(httpAddr, ":")
	cases := []struct {
		method, host string
		want         int
	}{
		{"GET", httpAddr, http.StatusOK},
		{"GET", "localhost:" + port, http.StatusOK},
		{"GET", "claimd.internal:" + port, http.StatusOK},
		{"GET", "rebind.attacker.example:" + port, http.StatusForbidden},
		{"PUT", "rebind.attacker.example:" + port, http.StatusForbidden},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, "http://"+httpAddr+"/v1/agent/self", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = c.host
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if c.want == http.StatusOK && resp.StatusCode != http.StatusOK ||
			c.want == http.StatusForbidden && (resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "rebind.attacker.example")) {
			t.Errorf("%s Host %s exp: %d got: %d %s", c.method, c.host, c.want, resp.StatusCode, body)
		}
	}

	b, _, err := startPlainAgent(t, "-http-allowed-hosts", "claimd.internal:4646")
	b.stop()
	if err == nil || !strings.Contains(err.Error(), "-http-allowed-hosts") || !strings.Contains(err.Error(), "not a host name") {
		t.Fatalf("agent with a port in -http-allowed-hosts exp: refused naming the flag got: %v", err)
	}
}
