package integration

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/server"
)

// lockedBuffer is a log sink the test reads while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A handshake whose turn at its address's pace (32 at once, 64 a second)
// would come after the server's configured handshake bound is refused at
// once, and the refusal names that bound. With a 1 s bound, 128 silent
// TLS openings from one address (all its opening slots) leave some 30
// whose turn is more than a second away; at the default 10 s bound none
// would be (the last turn is 1.5 s away), so this fails if the pace does
// not use the configured value.
func TestTLS_HandshakePaceRefusesPastTheConfiguredBound(t *testing.T) {
	const (
		bound           = server.MinTLSHandshakeTimeout
		maxOpeningPerIP = 128 // server/listener.go
	)
	logs := &lockedBuffer{}
	_, s, cl := secureLeaderWith(t, 1, harness.Options{Configure: func(cfg *server.Config) {
		cfg.TLSHandshakeTimeout = bound
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeName, Level: hclog.Warn, Output: logs})
	}})
	stats := runtimeStats(t, cl)

	// From an address of its own, so that the harness's clients keep
	// their handshake turns.
	dialer := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	type closed struct {
		i     int
		after time.Duration // since this connection was dialled
		err   error
	}
	results := make(chan closed, maxOpeningPerIP)
	for i := range maxOpeningPerIP {
		dialled := time.Now()
		conn, err := dialer.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		// The TLS byte, then silence.
		if _, err := conn.Write([]byte{byte(rpc.ProtoTLS)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		go func() {
			// A turn is at most bound away and its handshake bound long:
			// every connection is closed well within 2·bound + 5 s.
			_, err := expectClosed(conn, time.Until(dialled.Add(2*bound+5*time.Second)))
			results <- closed{i, time.Since(dialled), err}
		}()
	}
	// A connection closed sooner than the bound after it was dialled was
	// not timed out (its deadline is the bound after its turn, which comes
	// after its dial): the pace refused it.
	early := 0
	for range maxOpeningPerIP {
		r := <-results
		if r.err != nil {
			t.Errorf("connection %d: %v", r.i, r.err)
		} else if r.after < bound {
			early++
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	refused := runtimeStats(t, cl).OpeningRefused - stats.OpeningRefused
	t.Logf("%d silent TLS openings from one address with a %s bound: %d refused at once (OpeningRefused %d)",
		maxOpeningPerIP, bound, early, refused)
	if early == 0 || uint64(early) != refused {
		t.Fatalf("openings refused at once for a turn past the %s bound exp: > 0, as many as OpeningRefused (%d) got: %d",
			bound, refused, early)
	}
	want := fmt.Sprintf("its turn would come after the %s handshake bound (tls_handshake_timeout)", bound)
	harness.WaitFor(t, 5*time.Second, func() error {
		if !strings.Contains(logs.String(), want) {
			return fmt.Errorf("server log exp: a refusal naming %q got:\n%s", want, logs.String())
		}
		return nil
	})
}
