package integration

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// runCLIOK runs the claimd CLI and fails the test unless it exits 0.
func runCLIOK(t *testing.T, args ...string) harness.CLIResult {
	t.Helper()
	r := harness.RunCLI(t, args...)
	if r.Code != 0 {
		t.Fatalf("claimd %s exp: exit 0 got: %d %s", strings.Join(args, " "), r.Code, r.Stderr)
	}
	return r
}

// wroteFiles returns the paths a `tls ... create` command reports.
func wroteFiles(t *testing.T, r harness.CLIResult) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if p, ok := strings.CutPrefix(l, "==> wrote "); ok {
			out = append(out, p)
		}
	}
	if len(out) != 2 {
		t.Fatalf("tls create exp: two files written got: %q", r.Stdout)
	}
	return out
}

func certSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// peerSerial opens a NEW connection to addr (ProtoTLS on the raw
// connection, then the handshake) and returns the serial of the
// certificate the server presents.
func peerSerial(addr string, cfg *tls.Config) (*big.Int, error) {
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(rpc.HandshakeTimeout))
	if _, err := raw.Write([]byte{byte(rpc.ProtoTLS)}); err != nil {
		return nil, err
	}
	tc := tls.Client(raw, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	// Name a protocol so the server's side of the opening ends cleanly.
	_, _ = tc.Write([]byte{byte(rpc.ProtoRPC)})
	return tc.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// candidateLines counts Raft's "entering candidate state" log lines: a
// server logs one each time it starts an election (a new term).
func candidateLines(procs []*harness.Process) int {
	n := 0
	for _, p := range procs {
		n += strings.Count(p.Output(), "entering candidate state")
	}
	return n
}

var termRe = regexp.MustCompile(`term=(\d+)`)

// maxTermLogged is the highest term any process logged.
func maxTermLogged(procs []*harness.Process) string {
	best, bestN := "", -1
	for _, p := range procs {
		for _, m := range termRe.FindAllStringSubmatch(p.Output(), -1) {
			var n int
			fmt.Sscan(m[1], &n)
			if n > bestN {
				best, bestN = m[1], n
			}
		}
	}
	return best
}

func TestProcesses_TLSCertificateReloadOnSIGHUPKeepsLeader(t *testing.T) {
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	runCLIOK(t, "tls", "ca", "create", "-dir", pkiDir)
	caFile := filepath.Join(pkiDir, "claimd-agent-ca.pem")
	caArgs := []string{"-ca", caFile, "-key", filepath.Join(pkiDir, "claimd-agent-ca-key.pem"), "-dir", pkiDir}
	var certs, keys []string
	for range 3 {
		f := wroteFiles(t, runCLIOK(t, append([]string{"tls", "cert", "create", "-server"}, caArgs...)...))
		certs, keys = append(certs, f[0]), append(keys, f[1])
	}
	cliFiles := wroteFiles(t, runCLIOK(t, append([]string{"tls", "cert", "create", "-cli"}, caArgs...)...))
	cliTLS, err := tlsutil.ClientConfigFromFiles(caFile, cliFiles[0], cliFiles[1], "")
	if err != nil {
		t.Fatal(err)
	}

	addrs := []string{harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)}
	var procs []*harness.Process
	byAddr := map[string]int{}
	for i := range addrs {
		name := fmt.Sprintf("s%d", i+1)
		// Production Raft timings: an election during the observation
		// window must come from the reload, not from a busy machine.
		procs = append(procs, harness.StartProcess(t, name, "agent", "-server",
			"-bootstrap-expect", "3", "-join", harness.JoinOthers(addrs, i),
			"-bind", addrs[i], "-data-dir", filepath.Join(dir, name), "-node-name", name,
			"-tls-ca-file", caFile, "-tls-cert-file", certs[i], "-tls-key-file", keys[i],
			"-acl-enabled", "-log-level", "info"))
		byAddr[addrs[i]] = i
	}

	// Bootstrap ACLs (through any server, once there is a leader).
	var token string
	harness.WaitFor(t, 60*time.Second, func() error {
		cl, err := api.NewClient(api.Config{Addresses: addrs, TLS: cliTLS, Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		defer cl.Close()
		tok, err := cl.ACLBootstrap(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		token = tok.SecretID
		return nil
	})
	cliArgs := []string{"-ca-cert", caFile, "-client-cert", cliFiles[0], "-client-key", cliFiles[1],
		"-token", token, "-timeout", "10s"}
	listPeers := func(addr string) ([][]string, error) {
		r := harness.RunCLI(t, append([]string{"operator", "raft", "list-peers", "-address", addr}, cliArgs...)...)
		if r.Code != 0 {
			return nil, fmt.Errorf("list-peers via %s exit %d: %s", addr, r.Code, r.Stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		var rows [][]string
		for _, l := range lines[1:] {
			rows = append(rows, strings.Fields(l))
		}
		return rows, nil
	}
	var leader string
	harness.WaitFor(t, 60*time.Second, func() error {
		rows, err := listPeers(addrs[0])
		if err != nil {
			return err
		}
		if len(rows) != 3 {
			return fmt.Errorf("peers exp: 3 got: %v", rows)
		}
		if leader = leaderRow(rows); leader == "" {
			return fmt.Errorf("no leader in %v", rows)
		}
		return nil
	})
	// Every server knows that leader.
	leaderOf := func(addr string) (string, error) {
		cl, err := api.NewClient(api.Config{Addresses: []string{addr}, TLS: cliTLS, Timeout: 10 * time.Second})
		if err != nil {
			return "", err
		}
		defer cl.Close()
		return cl.Leader(harness.Ctx(t, 10*time.Second))
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		for _, a := range addrs {
			if got, err := leaderOf(a); err != nil || got != leader {
				return fmt.Errorf("%s: leader exp: %s got: %q %v", a, leader, got, err)
			}
		}
		return nil
	})

	// The leader's certificate is the one reloaded: leadership, and the
	// Raft connections it holds to both followers, must ride through it.
	target := byAddr[leader]
	oldSerial := certSerial(t, certs[target])
	if got, err := peerSerial(leader, cliTLS); err != nil || got.Cmp(oldSerial) != 0 {
		t.Fatalf("serial before reload exp: %s got: %v %v", oldSerial, got, err)
	}
	// A session opened before the reload, to check it survives.
	tlsDial := rpc.TLSDialer(nil, func() *tls.Config { return cliTLS }, false)
	oldSession, err := rpc.DialMux(harness.Ctx(t, 10*time.Second), tlsDial, leader, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer oldSession.Close()
	if err := oldSession.Call(harness.Ctx(t, 10*time.Second), "Status.Ping", &structs.EmptyArgs{}, &struct{}{}); err != nil {
		t.Fatalf("ping on the session before the reload: %v", err)
	}
	candidates, term := candidateLines(procs), maxTermLogged(procs)
	if candidates == 0 || term == "" {
		t.Fatalf("raft election log lines exp: at least the first election got: %d lines, term %q (log format changed?)", candidates, term)
	}

	// A newly issued certificate replaces the leader's files, then SIGHUP.
	fresh := wroteFiles(t, runCLIOK(t, append([]string{"tls", "cert", "create", "-server"}, caArgs...)...))
	newSerial := certSerial(t, fresh[0])
	if newSerial.Cmp(oldSerial) == 0 {
		t.Fatal("a new certificate exp: a new serial got: the same")
	}
	// Key first: a reload between the two renames would see a mismatch
	// and keep the old pair, never a half-new one.
	if err := os.Rename(fresh[1], keys[target]); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh[0], certs[target]); err != nil {
		t.Fatal(err)
	}
	hupAt := time.Now()
	// Signal waits for an exit; an agent must not exit on SIGHUP.
	if err := procs[target].Signal(syscall.SIGHUP, 500*time.Millisecond); err == nil {
		t.Fatalf("%s exp: keeps running after SIGHUP got: exited\n%s", procs[target].Name, procs[target].Output())
	}
	harness.WaitFor(t, 20*time.Second, func() error {
		// In hex, as `openssl x509 -noout -serial` prints it (issue 30).
		hex := strings.ToUpper(newSerial.Text(16))
		if len(hex)%2 == 1 {
			hex = "0" + hex
		}
		if !strings.Contains(procs[target].Output(), "serial="+hex) {
			return fmt.Errorf("%s exp: logs the reload of serial %s got: not yet", procs[target].Name, hex)
		}
		return nil
	})
	// A new connection sees the new certificate.
	harness.WaitFor(t, 20*time.Second, func() error {
		got, err := peerSerial(leader, cliTLS)
		if err != nil {
			return err
		}
		if got.Cmp(newSerial) != 0 {
			return fmt.Errorf("serial on a new connection exp: %s got: %s", newSerial, got)
		}
		return nil
	})
	t.Logf("new connections see serial %s %s after SIGHUP", newSerial, time.Since(hupAt).Round(time.Millisecond))

	// Observation window: a few seconds, many election timeouts at
	// production timings (1 s). Same leader everywhere, no new election.
	end := time.Now().Add(5 * time.Second)
	checks := 0
	for time.Now().Before(end) {
		for _, a := range addrs {
			got, err := leaderOf(a)
			if err != nil {
				t.Fatalf("%s after the reload: %v", a, err)
			}
			if got != leader {
				t.Fatalf("%s after the reload: leader exp: %s got: %q", a, leader, got)
			}
		}
		checks++
		time.Sleep(200 * time.Millisecond)
	}
	if got := candidateLines(procs); got != candidates {
		t.Fatalf("elections after the reload exp: none (%d candidate lines, term %s) got: %d candidate lines, term %s",
			candidates, term, got, maxTermLogged(procs))
	}
	if got := maxTermLogged(procs); got != term {
		t.Fatalf("raft term exp: %s got: %s", term, got)
	}
	// The CLI (its own name check included) talks to the reloaded server,
	// which still leads a cluster of three.
	rows, err := listPeers(leader)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || leaderRow(rows) != leader {
		t.Fatalf("list-peers via the reloaded server exp: 3 peers led by %s got: %v", leader, rows)
	}
	// The session from before the reload is still served.
	if err := oldSession.Call(harness.Ctx(t, 10*time.Second), "Status.Ping", &structs.EmptyArgs{}, &struct{}{}); err != nil {
		t.Fatalf("session opened before the reload exp: still served got: %v", err)
	}
	// And the cluster commits a write through a follower (forwarded to
	// the reloaded leader).
	follower := addrs[(target+1)%3]
	spec := filepath.Join(dir, "vol.json")
	writeSpec(t, spec, `{"id":"after-reload","name":"after reload","external_id":"after-reload","plugin_id":"hostdir",
		"access_mode":"single-node-writer","attachment_mode":"file-system"}`)
	runCLIOK(t, append(append([]string{"volume", "register", "-address", follower}, cliArgs...), spec)...)
	t.Logf("leader %s unchanged over %d checks in 5s; term %s; candidate lines %d", leader, checks, term, candidates)
}
