package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A -tls-handshake-timeout outside 1s..5m is refused at start, naming the
// field, before the server writes anything; 0 too (server.Config would
// read it as the default, an operator's 0 is a mistake).
func TestAgent_BadTLSHandshakeTimeoutIsRefused(t *testing.T) {
	for _, c := range []struct{ flag, want string }{
		{"0s", "tls_handshake_timeout: 0s is outside 1s to 5m0s"},
		{"-3s", "tls_handshake_timeout: -3s is outside 1s to 5m0s"},
		{"100ms", "tls_handshake_timeout: 100ms is outside 1s to 5m0s"},
		{"6m", "tls_handshake_timeout: 6m0s is outside 1s to 5m0s"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		var out, errb bytes.Buffer
		code := runAgent([]string{"-server", "-bootstrap-expect", "1", "-bind", "127.0.0.1:0", "-data-dir", dir,
			"-tls-handshake-timeout", c.flag, "-http-addr", "off"}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), c.want) {
			t.Fatalf("-tls-handshake-timeout %s exp: exit 1 naming %q got: %d %q", c.flag, c.want, code, errb.String())
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("-tls-handshake-timeout %s exp: nothing written got: data dir %v", c.flag, err)
		}
	}
}
