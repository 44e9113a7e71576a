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
// 8 MiB body to a secured agent (a real process), first without a token
// (refused before the body is read: a large body needs a valid token),
// then with a valid one (at most a few bodies are read at once, the rest
// refused with 503 at once, and each read is bounded in time). The agent
// stays under 200 MB above its idle RSS, and answers a legitimate read and
// a legitimate small write within a second throughout. Before the HTTP
// API bounded bodies, the same flood took the agent from 25 MiB to over
// 1 GiB, and a read took 2 s.
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
	// call is one legitimate request with the management token; it
	// returns how long the answer took.
	call := func(method, path, body string) (time.Duration, error) {
		req, _ := http.NewRequest(method, "https://"+httpAddr+path, strings.NewReader(body))
		req.Header.Set("X-Claimd-Token", env["CLAIMD_TOKEN"])
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		start := time.Now()
		resp, err := legit.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
		}
		return time.Since(start), nil
	}
	const spec = `{"id": "legit", "external_id": "legit", "plugin_id": "hostdir",
  "access_mode": "single-node-writer", "attachment_mode": "file-system"}`
	harness.WaitFor(t, 30*time.Second, func() error { _, err := call("GET", "/v1/volumes", ""); return err })
	idle := processRSS(t, dev.PID())

	for _, round := range []struct {
		name, token string
		// window is how long the flood may go on: refusals end each
		// connection at once; read bodies take about 6 s to send. The
		// round ends earlier once every flood connection has ended:
		// after that there is no flood left to measure.
		window time.Duration
	}{
		{"no token", "", 5 * time.Second},
		{"a valid token", env["CLAIMD_TOKEN"], 12 * time.Second},
	} {
		stop := make(chan struct{})
		statuses := slowBodies(t, cfg, httpAddr, round.token, 60, stop)
		ended := make(chan map[int]int, 1)
		go func() {
			counts := map[int]int{}
			for code := range statuses {
				counts[code]++
			}
			ended <- counts
		}()
		var counts map[int]int
		var peak int64
		var slowest time.Duration
		sample := time.NewTicker(200 * time.Millisecond) // a sampling interval, not a synchronisation
		deadline := time.After(round.window)
	flood:
		for {
			if rss := processRSS(t, dev.PID()); rss > peak {
				peak = rss
			}
			for _, c := range [][3]string{{"GET", "/v1/volumes", ""}, {"PUT", "/v1/volume/legit", spec}} {
				d, err := call(c[0], c[1], c[2])
				if err != nil {
					t.Fatalf("%s: legitimate %s %s during the flood exp: 200 got: %v", round.name, c[0], c[1], err)
				}
				slowest = max(slowest, d)
			}
			select {
			case <-deadline:
				break flood
			case counts = <-ended:
				break flood
			case <-sample.C:
			}
		}
		sample.Stop()
		close(stop)
		if counts == nil {
			counts = <-ended
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
