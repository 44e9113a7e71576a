package server

import (
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/rpc"
)

// The TLS handshake bound: 0 is the default (rpc.HandshakeTimeout), a set
// value is used as it is, and one outside 1s..5m is refused naming the
// field.
func TestConfig_TLSHandshakeTimeout(t *testing.T) {
	base := Config{DataDir: t.TempDir(), BindAddr: "127.0.0.1:0"}
	if err := base.validate(); err != nil || base.tlsHandshakeTimeout() != rpc.HandshakeTimeout {
		t.Fatalf("unset exp: valid, %s got: %v, %s", rpc.HandshakeTimeout, err, base.tlsHandshakeTimeout())
	}
	set := base
	set.TLSHandshakeTimeout = 3 * time.Second
	if err := set.validate(); err != nil || set.tlsHandshakeTimeout() != 3*time.Second {
		t.Fatalf("3s exp: valid, 3s got: %v, %s", err, set.tlsHandshakeTimeout())
	}
	for _, d := range []time.Duration{-time.Second, 999 * time.Millisecond, 5*time.Minute + 1} {
		bad := base
		bad.TLSHandshakeTimeout = d
		err := bad.validate()
		if err == nil || !strings.Contains(err.Error(), "tls_handshake_timeout: ") || !strings.Contains(err.Error(), "outside 1s to 5m0s") {
			t.Fatalf("%s exp: refused naming tls_handshake_timeout got: %v", d, err)
		}
	}
}
