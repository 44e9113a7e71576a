package integration

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/tlsutil"
)

// processRSS reads a process's resident set size (VmRSS) in bytes.
func processRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// slowBodies opens n HTTPS connections to addr that each announce an
// 8 MiB JSON body (with token, or none) and send it a little at a time,
// until stop closes; each returns the status it got, or 0 if none.
func slowBodies(t *testing.T, cfg *tls.Config, addr, token string, n int, stop <-chan struct{}) <-chan int {
	t.Helper()
	const declared = 8 << 20
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
			if err != nil {
				statuses <- -1
				return
			}
			defer conn.Close()
			head := fmt.Sprintf("PUT /v1/volume/flood%d HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", i, addr, declared)
			if token != "" {
				head += "X-Claimd-Token: " + token + "\r\n"
			}
			if _, err := conn.Write([]byte(head + "\r\n{\"id\":\"flood\",\"name\":\"")); err != nil {
				statuses <- -1
				return
			}
			got := make(chan int, 1)
			go func() {
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					got <- 0
					return
				}
				resp.Body.Close()
				got <- resp.StatusCode
			}()
			chunk := []byte(strings.Repeat("x", 64<<10))
			sent := 0
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for sent+len(chunk) < declared {
				select {
				case code := <-got:
					statuses <- code
					return
				case <-stop:
					statuses <- 0
					return
				case <-tick.C:
					// 64 KiB every 50 ms: about 1.3 MB/s, slower than the
					// body could be read, so bodies pile up if nothing stops
					// them.
					_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
					if _, err := conn.Write(chunk); err != nil {
						select {
						case code := <-got:
							statuses <- code
						case <-time.After(5 * time.Second):
							statuses <- 0
						}
						return
					}
					sent += len(chunk)
				}
			}
			statuses <- 0
		}()
	}
	go func() { wg.Wait(); close(statuses) }()
	return statuses
}

// TestHTTPAPI_SlowLargeBodiesAreBounded: 60 connections each trickling an
// 8 MiB body to a secured agent, first without a token (refused before the
// body is read: a large body needs a valid token), then with a valid one
// (at most a few bodies are read at once, the rest refused with 503, and
// each read is bounded in time). The agent stays under 200 MB above its
// idle RSS and answers a legitimate request within a second throughout.
func TestHTTPAPI_SlowLargeBodiesAreBounded(t *testing.T) {
	addr, httpAddr := harness.FreeAddr(t), harness.FreeAddr(t)
	dev := harness.StartProcess(t, "dev", "agent", "-dev", "-bind", addr, "-http-addr", httpAddr, "-raft-multiplier", "0.2")
	env := devEnv(t, dev)
	caPEM, err := os.ReadFile(env["CLAIMD_CACERT"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(env["CLAIMD_CLIENT_CERT"], env["CLAIMD_CLIENT_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		ServerName: tlsutil.Name(tlsutil.RoleServer, tlsutil.DefaultRegion)}
	legit := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	get := func() (time.Duration, error) {
		req, _ := http.NewRequest("GET", "https://"+httpAddr+"/v1/volumes", nil)
		req.Header.Set("X-Claimd-Token", env["CLAIMD_TOKEN"])
		start := time.Now()
		resp, err := legit.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(start), nil
	}
	harness.WaitFor(t, 30*time.Second, func() error { _, err := get(); return err })
	idle := processRSS(t, dev.PID())

	for _, round := range []struct {
		name, token string
		// refusedAtOnce: statuses every connection must end with.
		want map[int]bool
	}{
		{"no token", "", map[int]bool{http.StatusForbidden: true}},
		{"a valid token", env["CLAIMD_TOKEN"], map[int]bool{http.StatusServiceUnavailable: true, http.StatusRequestTimeout: true, http.StatusBadRequest: true, 0: true}},
	} {
		stop := make(chan struct{})
		statuses := slowBodies(t, cfg, httpAddr, round.token, 60, stop)
		var peak int64
		var slowest time.Duration
		deadline := time.Now().Add(12 * time.Second)
		for time.Now().Before(deadline) {
			if rss := processRSS(t, dev.PID()); rss > peak {
				peak = rss
			}
			d, err := get()
			if err != nil {
				t.Fatalf("%s: legitimate request during the flood exp: answered got: %v", round.name, err)
			}
			slowest = max(slowest, d)
			time.Sleep(200 * time.Millisecond) // a sampling interval, not a synchronisation
		}
		close(stop)
		counts := map[int]int{}
		for code := range statuses {
			counts[code]++
		}
		t.Logf("%s: idle RSS %d MiB, peak %d MiB, slowest legitimate request %v, statuses %v", round.name, idle>>20, peak>>20, slowest, counts)
		if peak-idle > 200<<20 {
			t.Errorf("%s: RSS exp: under idle+200 MiB (%d MiB) got: %d MiB", round.name, (idle+200<<20)>>20, peak>>20)
		}
		if slowest > time.Second {
			t.Errorf("%s: legitimate request during the flood exp: within 1 s got: %v", round.name, slowest)
		}
		if round.token == "" && counts[http.StatusForbidden] != 60 {
			t.Errorf("%s: answers exp: 60 x 403 before the body is read got: %v", round.name, counts)
		}
		if round.token != "" && counts[http.StatusServiceUnavailable] < 60-maxLargeBodiesForTest {
			t.Errorf("%s: answers exp: at least %d x 503 (only %d large bodies at once) got: %v", round.name, 60-maxLargeBodiesForTest, maxLargeBodiesForTest, counts)
		}
	}
}

// maxLargeBodiesForTest is httpapi's cap on large bodies read at once.
const maxLargeBodiesForTest = 4
