package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
)

// A dev agent started from a configuration file uses its keys; after the
// file changes and SIGHUP, the agent logs what it reloaded and what needs
// a restart, and logs at the new level.
func TestProcesses_AgentConfigFileAndSIGHUPReload(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr, otherAddr := harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)
	dataDir := filepath.Join(dir, "data")
	cfgFile := filepath.Join(dir, "agent.hcl")
	writeConfig := func(level, bind, ttl string) {
		t.Helper()
		writeSpec(t, cfgFile, fmt.Sprintf(`
node_name = "cfg-node"
data_dir  = %q
bind      = %q
http_addr = %q
log_level = %q

server {
  raft_multiplier = 0.2
  heartbeat_ttl   = %q
}

client {
  plugin_probe_interval = "2s"
}
`, dataDir, bind, httpAddr, level, ttl))
	}
	writeConfig("warn", addr, "10s")
	dev := harness.StartProcess(t, "dev", "agent", "-dev", "-config", cfgFile)

	var env []string
	for k, v := range devEnv(t, dev) {
		env = append(env, k+"="+v)
	}
	cli := func(args ...string) harness.CLIResult { return harness.RunCLIEnv(t, env, args...) }
	out := dev.Output()
	// bind and data_dir come from the file.
	if !strings.Contains(out, "claimd server running: id=") || !strings.Contains(out, "addr="+addr+" data-dir="+dataDir) {
		t.Fatalf("dev agent exp: server on %s with data dir %s got:\n%s", addr, dataDir, out)
	}
	m := regexp.MustCompile(`claimd client running: node=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dev agent exp: a client running line got:\n%s", out)
	}
	nodeID := m[1]
	// node_name from the file.
	harness.WaitFor(t, 30*time.Second, func() error {
		r := cli("node", "status", "-address", addr)
		if r.Code != 0 || !strings.Contains(r.Stdout, "cfg-node") {
			return fmt.Errorf("node status exp: node cfg-node got: %d %q %q", r.Code, r.Stdout, r.Stderr)
		}
		return nil
	})
	// http_addr from the file: the HTTP API listens there.
	if !regexp.MustCompile(`claimd HTTP API: \S*` + regexp.QuoteMeta(httpAddr)).MatchString(out) {
		t.Fatalf("dev agent exp: HTTP API on %s got:\n%s", httpAddr, out)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		c, err := net.DialTimeout("tcp", httpAddr, time.Second)
		if err != nil {
			return fmt.Errorf("http_addr %s exp: listening got: %v", httpAddr, err)
		}
		return c.Close()
	})
	// log_level = "warn": the info lines of a start (server started,
	// leader elected, ...) were not written.
	if out := dev.Output(); strings.Contains(out, "[INFO]") || strings.Contains(out, "[DEBUG]") {
		t.Fatalf("log_level warn exp: no info or debug lines got:\n%s", out)
	}

	// A new level, a new heartbeat TTL (both live) and a new bind (needs a
	// restart); then SIGHUP.
	writeConfig("debug", otherAddr, "20s")
	if err := dev.Signal(syscall.SIGHUP, 300*time.Millisecond); err == nil {
		t.Fatalf("dev agent exp: keeps running after SIGHUP got: exited\n%s", dev.Output())
	}
	var reloadLine string
	harness.WaitFor(t, 20*time.Second, func() error {
		for _, l := range strings.Split(dev.Output(), "\n") {
			if strings.Contains(l, "SIGHUP: configuration reloaded") {
				reloadLine = l
				return nil
			}
		}
		return fmt.Errorf("dev agent exp: a reload line got: not yet")
	})
	for _, e := range []string{"[INFO]", "log_level=debug", "server.heartbeat_ttl=20s", "tls files", "needs_restart=bind"} {
		if !strings.Contains(reloadLine, e) {
			t.Fatalf("reload line exp: contains %q got: %q", e, reloadLine)
		}
	}
	t.Logf("reload line: %s", reloadLine)
	mark := len(dev.Output())

	// Debug lines now appear: a claim and its mount log at debug.
	spec := filepath.Join(dir, "vol.json")
	writeSpec(t, spec, `{"id":"cfgvol","name":"cfgvol","external_id":"cfgvol","plugin_id":"hostdir",
		"access_mode":"single-node-writer","attachment_mode":"file-system"}`)
	if r := cli("volume", "register", "-address", addr, spec); r.Code != 0 {
		t.Fatalf("volume register exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	if r := cli("alloc", "run", "-address", addr, "-node", nodeID, "-volume", "cfgvol", "-id", "cfg-alloc"); r.Code != 0 {
		t.Fatalf("alloc run exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(dev.Output()[mark:], "[DEBUG]") {
			return fmt.Errorf("after the reload to debug exp: debug lines got: none yet")
		}
		return nil
	})

	// A file that no longer parses is refused; the agent keeps running at
	// the level it had.
	writeSpec(t, cfgFile, "log_level = \"error\"\nserver {\n  heartbeat_ttl = \"soon\"\n}\n")
	if err := dev.Signal(syscall.SIGHUP, 300*time.Millisecond); err == nil {
		t.Fatalf("dev agent exp: keeps running after SIGHUP with a bad file got: exited\n%s", dev.Output())
	}
	harness.WaitFor(t, 20*time.Second, func() error {
		out := dev.Output()
		if !strings.Contains(out, "SIGHUP: configuration refused") || !strings.Contains(out, cfgFile+":3: server.heartbeat_ttl") {
			return fmt.Errorf("dev agent exp: the bad file refused naming %s:3 got: not yet", cfgFile)
		}
		return nil
	})
	// The mark goes before the stop: the agent unmounts at once and logs
	// it (decision 61), often before the CLI has returned.
	mark = len(dev.Output())
	if r := cli("alloc", "stop", "-address", addr, "cfg-alloc"); r.Code != 0 {
		t.Fatalf("alloc stop exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(dev.Output()[mark:], "[DEBUG]") {
			return fmt.Errorf("after a refused reload exp: still at debug got: no debug lines yet")
		}
		return nil
	})
	if err := dev.Signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dataDir); err != nil {
		t.Fatalf("data_dir from the file exp: used got: %v", err)
	}
}
