package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/server"
)

// fullHCL sets every key; fullJSON says the same in JSON.
const fullHCL = `
node_name  = "s1"
data_dir   = "/var/lib/claimd"
bind       = "10.0.0.1:4647"
advertise  = "10.0.0.1:4647"
http_addr  = "127.0.0.1:4646"
http_allowed_hosts = ["claimd.internal"]
region     = "eu"
log_level  = "warn"
log_json   = true
debug_addr = "127.0.0.1:6060"
dev          = false
dev_insecure = false

server {
  enabled              = true
  bootstrap_expect     = 3
  join                 = ["10.0.0.2:4647", "10.0.0.3:4647"]
  raft_multiplier      = 1.5
  raft_log_store       = "wal"
  heartbeat_ttl        = "20s"
  storage_lease        = "15s"
  claim_gc_interval    = "10m"
  reconcile_interval   = "5m"
  release_workers      = 8
  release_backoff_base = "2s"
  release_backoff_max  = "2m"
  leave_on_terminate   = true
  tls_handshake_timeout = "7s"

  autopilot_cleanup_dead_servers = true
}

client {
  enabled               = true
  servers               = ["10.0.0.1:4647"]
  plugin_probe_interval = "7s"
  node_lease            = "45s"
  fence_command         = "/usr/local/bin/stop-workload"
  fence_timeout         = "3s"
  own_detach_timeout    = "4s"
  plugin "hostdir" {
    type             = "monolith"
    socket           = "/run/csi/hostdir.sock"
    controller_calls = 8
  }
  plugin "ebs" {
    type   = "node"
    socket = "unix:///run/csi/ebs.sock"
  }
}

tls {
  ca_file                = "/etc/claimd/ca.pem"
  cert_file              = "/etc/claimd/server.pem"
  key_file               = "/etc/claimd/server-key.pem"
  verify_server_hostname = false
  allow_plaintext        = true
}

acl {
  enabled = true
  token   = "a-secret-token"
}

telemetry {
  prometheus_retention = "60s"
  disable_hostname     = true
}
`

const fullJSON = `{
  "node_name": "s1", "data_dir": "/var/lib/claimd", "bind": "10.0.0.1:4647", "advertise": "10.0.0.1:4647",
  "http_addr": "127.0.0.1:4646", "http_allowed_hosts": ["claimd.internal"], "region": "eu", "log_level": "warn", "log_json": true,
  "debug_addr": "127.0.0.1:6060", "dev": false, "dev_insecure": false,
  "server": {
    "enabled": true, "bootstrap_expect": 3, "join": ["10.0.0.2:4647", "10.0.0.3:4647"],
    "raft_multiplier": 1.5, "raft_log_store": "wal", "heartbeat_ttl": "20s", "storage_lease": "15s", "claim_gc_interval": "10m", "reconcile_interval": "5m", "release_workers": 8,
    "release_backoff_base": "2s", "release_backoff_max": "2m", "leave_on_terminate": true, "tls_handshake_timeout": "7s",
    "autopilot_cleanup_dead_servers": true
  },
  "client": {
    "enabled": true, "servers": ["10.0.0.1:4647"], "plugin_probe_interval": "7s",
    "node_lease": "45s", "fence_command": "/usr/local/bin/stop-workload", "fence_timeout": "3s",
    "own_detach_timeout": "4s",
    "plugin": {
      "hostdir": {"type": "monolith", "socket": "/run/csi/hostdir.sock", "controller_calls": 8},
      "ebs": {"type": "node", "socket": "unix:///run/csi/ebs.sock"}
    }
  },
  "tls": {
    "ca_file": "/etc/claimd/ca.pem", "cert_file": "/etc/claimd/server.pem",
    "key_file": "/etc/claimd/server-key.pem", "verify_server_hostname": false, "allow_plaintext": true
  },
  "acl": {"enabled": true, "token": "a-secret-token"},
  "telemetry": {"prometheus_retention": "60s", "disable_hostname": true}
}`

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustLoad(t *testing.T, paths ...string) agentFlags {
	t.Helper()
	cfg, err := loadConfigFiles(paths)
	if err != nil {
		t.Fatalf("load %v exp: no error got: %v", paths, err)
	}
	var f agentFlags
	cfg.apply(&f, nil)
	return f
}

func TestConfigFile_HCLAndJSONSayTheSame(t *testing.T) {
	dir := t.TempDir()
	h := writeFile(t, filepath.Join(dir, "agent.hcl"), fullHCL)
	j := writeFile(t, filepath.Join(dir, "agent.json"), fullJSON)

	cfg, err := loadConfigFiles([]string{h})
	if err != nil {
		t.Fatal(err)
	}
	// The full example names every key: none is unreachable from a file.
	for _, k := range configKeys {
		if _, ok := cfg.values[k.path()]; !ok {
			t.Errorf("key %s exp: set by the full example got: missing", k.path())
		}
	}
	fromHCL, fromJSON := mustLoad(t, h), mustLoad(t, j)
	if !reflect.DeepEqual(fromHCL, fromJSON) {
		t.Fatalf("HCL and JSON exp: equal got:\n%+v\n%+v", fromHCL, fromJSON)
	}
	exp := agentFlags{
		nodeName: "s1", dataDir: "/var/lib/claimd", bind: "10.0.0.1:4647", advertise: "10.0.0.1:4647",
		httpAddr: "127.0.0.1:4646", httpHosts: "claimd.internal", logLevel: "warn", logJSON: true, debugAddr: "127.0.0.1:6060",
		server: true, bootstrapExpect: 3, join: "10.0.0.2:4647,10.0.0.3:4647", raftMultiplier: 1.5, raftLogStore: "wal",
		heartbeatTTL: 20 * time.Second, storageLease: 15 * time.Second, claimGCInterval: 10 * time.Minute, reconcileEvery: 5 * time.Minute, releaseWorkers: 8,
		backoffBase: 2 * time.Second, backoffMax: 2 * time.Minute, leaveOnTerm: true, apCleanupDead: true, tlsHandshake: 7 * time.Second,
		client: true, servers: "10.0.0.1:4647", probeInterval: 7 * time.Second,
		nodeLease: 45 * time.Second, fenceCommand: "/usr/local/bin/stop-workload", fenceTimeout: 3 * time.Second,
		ownDetach: 4 * time.Second,
		plugins: pluginFlags{
			{ID: "hostdir", Type: csi.PluginTypeMonolith, Socket: "/run/csi/hostdir.sock", ControllerCalls: 8},
			{ID: "ebs", Type: csi.PluginTypeNode, Socket: "unix:///run/csi/ebs.sock"},
		},
		tlsAllowPlain: true, aclEnabled: true, aclToken: "a-secret-token",
		promRetention: time.Minute, disableHostname: true,
	}
	exp.tls.CAFile, exp.tls.CertFile, exp.tls.KeyFile = "/etc/claimd/ca.pem", "/etc/claimd/server.pem", "/etc/claimd/server-key.pem"
	exp.tls.Region, exp.tls.VerifyServerHostname = "eu", false
	if !reflect.DeepEqual(fromHCL, exp) {
		t.Fatalf("decoded exp:\n%+v\ngot:\n%+v", exp, fromHCL)
	}
}

// Every agent flag has a key, and every key's flag exists: a new flag
// without a key (or a renamed one) fails here.
func TestConfigFile_EveryAgentFlagHasAKey(t *testing.T) {
	var out, errb bytes.Buffer
	run([]string{"agent", "-h"}, &out, &errb)
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(errb.String(), -1) {
		flags[m[1]] = true
	}
	if !flags["server"] || !flags["config"] {
		t.Fatalf("agent -h exp: a flag list with -server and -config got:\n%s", errb.String())
	}
	delete(flags, "config")
	// A testing knob (the lease clock's rate) is a flag only: a config
	// file is where production settings live.
	delete(flags, "clock-rate")
	keys := map[string]bool{}
	for _, k := range configKeys {
		if k.flag != "" {
			keys[k.flag] = true
			if !flags[k.flag] {
				t.Errorf("key %s exp: flag -%s exists got: no such flag", k.path(), k.flag)
			}
		}
	}
	for fl := range flags {
		if !keys[fl] {
			t.Errorf("flag -%s exp: a configuration key got: none", fl)
		}
	}
}

func TestConfigFile_LaterFilesOverrideEarlierKeyByKey(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, filepath.Join(dir, "a.hcl"), `
log_level = "warn"
bind      = "10.0.0.1:4647"
server {
  heartbeat_ttl = "20s"
  join          = ["10.0.0.2:4647"]
}
client {
  plugin "x" {
    type   = "node"
    socket = "/run/x.sock"
  }
  plugin "y" {
    type   = "node"
    socket = "/run/y.sock"
  }
}
`)
	b := writeFile(t, filepath.Join(dir, "b.json"), `{
  "log_level": "debug",
  "server": {"join": ["10.0.0.3:4647"]},
  "client": {"plugin": {"y": {"type": "monolith", "socket": "/run/y2.sock"}, "z": {"type": "node", "socket": "/run/z.sock"}}}
}`)
	f := mustLoad(t, a, b)
	if f.logLevel != "debug" || f.bind != "10.0.0.1:4647" || f.heartbeatTTL != 20*time.Second || f.join != "10.0.0.3:4647" {
		t.Fatalf("merged exp: log_level debug (b), bind and heartbeat_ttl from a, join from b got: %q %q %s %q",
			f.logLevel, f.bind, f.heartbeatTTL, f.join)
	}
	exp := pluginFlags{{ID: "x", Type: "node", Socket: "/run/x.sock"}, {ID: "y", Type: "monolith", Socket: "/run/y2.sock"},
		{ID: "z", Type: "node", Socket: "/run/z.sock"}}
	if !reflect.DeepEqual(f.plugins, exp) {
		t.Fatalf("plugins merged by id exp: %+v got: %+v", exp, f.plugins)
	}
	// The other order: a wins.
	if f := mustLoad(t, b, a); f.logLevel != "warn" || f.join != "10.0.0.2:4647" {
		t.Fatalf("b then a exp: a's log_level and join got: %q %q", f.logLevel, f.join)
	}
}

func TestConfigFile_DirectoryLoadsHCLAndJSONInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "20-b.json"), `{"node_name": "b", "data_dir": "/b"}`)
	writeFile(t, filepath.Join(dir, "10-a.hcl"), "node_name = \"a\"\ndata_dir = \"/a\"\nregion = \"eu\"\n")
	writeFile(t, filepath.Join(dir, "30-c.hcl"), "node_name = \"c\"\nhttp_addr = \"off\"\n")
	writeFile(t, filepath.Join(dir, "README.md"), "not a config { at all")
	writeFile(t, filepath.Join(dir, "40-d.hcl~"), "an editor's backup {")
	if err := os.Mkdir(filepath.Join(dir, "50-sub.hcl"), 0o700); err != nil {
		t.Fatal(err)
	}
	files, err := configFilesOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if exp := []string{"10-a.hcl", "20-b.json", "30-c.hcl"}; !slices.Equal(names, exp) {
		t.Fatalf("files of the dir exp: %v got: %v", exp, names)
	}
	f := mustLoad(t, dir)
	if f.nodeName != "c" || f.dataDir != "/b" || f.tls.Region != "eu" || f.httpAddr != "off" {
		t.Fatalf("dir merged exp: node_name c, data_dir /b, region eu, http_addr off got: %q %q %q %q", f.nodeName, f.dataDir, f.tls.Region, f.httpAddr)
	}
	// A file after the dir overrides it.
	last := writeFile(t, filepath.Join(t.TempDir(), "last.hcl"), `node_name = "last"`)
	if f := mustLoad(t, dir, last); f.nodeName != "last" {
		t.Fatalf("dir then file exp: node_name last got: %q", f.nodeName)
	}
}

// testFlagSet binds a few of the agent's flags to f as runAgent does
// (same names and defaults).
func testFlagSet(f *agentFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.logLevel, "log-level", "info", "")
	fs.StringVar(&f.bind, "bind", "127.0.0.1:4647", "")
	fs.DurationVar(&f.heartbeatTTL, "heartbeat-ttl", 10*time.Second, "")
	fs.BoolVar(&f.tls.VerifyServerHostname, "tls-verify-server-hostname", true, "")
	fs.Var(&f.plugins, "csi-plugin", "")
	return fs
}

func TestConfigFile_FlagsOnTheCommandLineWin(t *testing.T) {
	file := writeFile(t, filepath.Join(t.TempDir(), "agent.hcl"), `
log_level = "debug"
bind      = "10.0.0.1:4647"
server {
  heartbeat_ttl = "20s"
}
tls {
  verify_server_hostname = false
}
client {
  plugin "fromfile" {
    type   = "node"
    socket = "/run/file.sock"
  }
}
`)
	var f agentFlags
	fs := testFlagSet(&f)
	// -bind is set to its default value: set is set, it still wins.
	if err := fs.Parse([]string{"-log-level", "error", "-bind", "127.0.0.1:4647", "-csi-plugin", "id=cli,type=node,socket=/run/cli.sock"}); err != nil {
		t.Fatal(err)
	}
	if _, err := loadAgentConfig(fs, &f, []string{file}); err != nil {
		t.Fatal(err)
	}
	if f.logLevel != "error" || f.bind != "127.0.0.1:4647" {
		t.Fatalf("flags set on the command line exp: log-level error, bind 127.0.0.1:4647 got: %q %q", f.logLevel, f.bind)
	}
	if f.heartbeatTTL != 20*time.Second || f.tls.VerifyServerHostname {
		t.Fatalf("flags left at their defaults exp: the file's heartbeat_ttl 20s, verify_server_hostname false got: %s %v",
			f.heartbeatTTL, f.tls.VerifyServerHostname)
	}
	if len(f.plugins) != 1 || f.plugins[0].ID != "cli" {
		t.Fatalf("-csi-plugin on the command line exp: replaces the file's plugins got: %+v", f.plugins)
	}
}

func TestConfigFile_BadFilesAreRefusedNamingFileLineAndKey(t *testing.T) {
	cases := []struct {
		name, file, src string
		exp             []string // substrings of the error
	}{
		{"unknown top-level key", "a.hcl", "node_name = \"x\"\nnod_name = \"y\"\n",
			[]string{"a.hcl:2:", `"nod_name"`}},
		{"unknown key in a block", "a.hcl", "server {\n  enabled = true\n  bootstrap_expct = 3\n}\n",
			[]string{"a.hcl:3:", "server:", `"bootstrap_expct"`}},
		{"unknown block", "a.hcl", "\nservr {\n}\n", []string{"a.hcl:2:", `"servr"`}},
		{"bad duration", "a.hcl", "server {\n  heartbeat_ttl = \"10 seconds\"\n}\n",
			[]string{"a.hcl:2:", "server.heartbeat_ttl", `"10 seconds" is not a duration`}},
		{"lease out of range", "a.hcl", "client {\n  node_lease = \"1s\"\n}\n",
			[]string{"a.hcl:2:", "client.node_lease", "1s is not between 2s and 1h0m0s"}},
		{"number for a duration", "a.hcl", "client {\n\n  plugin_probe_interval = 5\n}\n",
			[]string{"a.hcl:3:", "client.plugin_probe_interval", "want a duration string", "got the number 5"}},
		{"string for a number", "a.hcl", "server {\n  bootstrap_expect = \"3\"\n}\n",
			[]string{"a.hcl:2:", "server.bootstrap_expect", "want a whole number, got a string"}},
		{"negative bootstrap_expect", "a.hcl", "server {\n  bootstrap_expect = -1\n}\n",
			[]string{"a.hcl:2:", "server.bootstrap_expect", "must not be negative"}},
		{"controller_calls on a node plugin", "a.hcl", "client {\n  plugin \"n\" {\n    type = \"node\"\n    socket = \"/run/n.sock\"\n    controller_calls = 4\n  }\n}\n",
			[]string{"client.plugin \"n\"", "controller_calls", "controller and monolith plugins"}},
		{"controller_calls out of range", "a.hcl", "client {\n  plugin \"c\" {\n    type = \"controller\"\n    socket = \"/run/c.sock\"\n    controller_calls = 1000\n  }\n}\n",
			[]string{"client.plugin \"c\"", "controller_calls", "1000 is not between 1 and 256"}},
		{"fraction for a whole number", "a.hcl", "server {\n  release_workers = 1.5\n}\n",
			[]string{"a.hcl:2:", "server.release_workers", "got the number 1.5"}},
		{"negative duration", "a.hcl", "server {\n  release_backoff_max = \"-1s\"\n}\n",
			[]string{"a.hcl:2:", "server.release_backoff_max", "must be longer than 0"}},
		{"TLS handshake bound of 0", "a.hcl", "server {\n  tls_handshake_timeout = \"0s\"\n}\n",
			[]string{"a.hcl:2:", "server.tls_handshake_timeout", "0s is outside 1s to 5m0s"}},
		{"TLS handshake bound too short", "a.hcl", "server {\n  tls_handshake_timeout = \"500ms\"\n}\n",
			[]string{"a.hcl:2:", "server.tls_handshake_timeout", "500ms is outside 1s to 5m0s"}},
		{"TLS handshake bound too long", "a.hcl", "server {\n  tls_handshake_timeout = \"1h\"\n}\n",
			[]string{"a.hcl:2:", "server.tls_handshake_timeout", "1h0m0s is outside 1s to 5m0s"}},
		{"string for a bool", "a.hcl", "log_json = \"true\"\n", []string{"a.hcl:1:", "log_json", "want true or false, got a string"}},
		{"bare word for a bool", "a.hcl", "server {\n  enabled = yes\n}\n", []string{"a.hcl:2:", "server.enabled", "want true or false, got the bare word yes"}},
		{"string for a list", "a.hcl", "server {\n  join = \"10.0.0.2:4647\"\n}\n", []string{"a.hcl:2:", "server.join", "want a list of strings"}},
		{"bad log level", "a.hcl", "log_level = \"loud\"\n", []string{"a.hcl:1:", "log_level", `"loud" is not one of`}},
		{"bad address", "a.hcl", "\nbind = \"10.0.0.1\"\n", []string{"a.hcl:2:", "bind", "not host:port"}},
		{"bad http address", "a.hcl", "http_addr = \"on\"\n", []string{"a.hcl:1:", "http_addr", "not host:port"}},
		{"an allowed host with a port", "a.hcl", "http_allowed_hosts = [\"claimd.internal:4646\"]\n", []string{"a.hcl:1:", "http_allowed_hosts", "not a host name"}},
		{"unknown plugin type", "a.hcl", "client {\n  plugin \"p\" {\n    type = \"sidecar\"\n    socket = \"/run/p.sock\"\n  }\n}\n",
			[]string{"a.hcl:2:", `client.plugin "p"`, `"sidecar" is not node, controller or monolith`}},
		{"plugin without socket", "a.hcl", "client {\n  plugin \"p\" {\n    type = \"node\"\n  }\n}\n",
			[]string{"a.hcl:2:", `client.plugin "p"`, `"socket" is required`}},
		{"plugin twice", "a.hcl", "client {\n  plugin \"p\" {\n    type = \"node\"\n    socket = \"/a.sock\"\n  }\n  plugin \"p\" {\n    type = \"node\"\n    socket = \"/b.sock\"\n  }\n}\n",
			[]string{"a.hcl:6:", `client.plugin "p"`, "defined twice (first at line 2)"}},
		{"block twice", "a.hcl", "server {\n}\nserver {\n}\n", []string{"a.hcl:3:", "server", "defined twice (first at line 1)"}},
		{"a bare word", "a.hcl", "data_dir = home\n", []string{"a.hcl:1:", "data_dir", "want a string, got the bare word home"}},
		{"a variable", "a.hcl", "data_dir = var.home\n", []string{"a.hcl:1:", "data_dir", "Variables not allowed"}},
		{"syntax error", "a.hcl", "server {\n  enabled = \n}\n", []string{"a.hcl:2:"}},
		{"json unknown key", "a.json", "{\n  \"server\": {\n    \"bootstrap_expct\": 3\n  }\n}\n",
			[]string{"a.json:3:", "server:", `"bootstrap_expct"`}},
		{"json bad duration", "a.json", "{\n  \"server\": {\n    \"heartbeat_ttl\": \"ten\"\n  }\n}\n",
			[]string{"a.json:3:", "server.heartbeat_ttl", `"ten" is not a duration`}},
		{"json wrong type", "a.json", "{\n\n  \"log_json\": 1\n}\n", []string{"a.json:3:", "log_json", "want true or false"}},
		{"json syntax error", "a.json", "{\n  \"bind\": \n}\n", []string{"a.json:3:"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, filepath.Join(t.TempDir(), c.file), c.src)
			_, err := loadConfigFiles([]string{path})
			if err == nil {
				t.Fatalf("exp: an error got: none")
			}
			msg := err.Error()
			for _, e := range c.exp {
				if strings.HasPrefix(e, c.file+":") {
					e = filepath.Join(filepath.Dir(path), e) // the full path, as given
				}
				if !strings.Contains(msg, e) {
					t.Errorf("error exp: contains %q got: %s", e, msg)
				}
			}
		})
	}
}

func TestConfigFile_EveryMistakeReportedAndSecretsNotEchoed(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "a.hcl"),
		"log_level = \"loud\"\nacl {\n  token = [\"s3cret-token\"]\n}\nserver {\n  heartbeat_ttl = \"x\"\n}\n")
	_, err := loadConfigFiles([]string{path})
	if err == nil {
		t.Fatal("exp: an error got: none")
	}
	msg := err.Error()
	for _, e := range []string{":1: log_level", ":3: acl.token: want a string, got a list", ":6: server.heartbeat_ttl"} {
		if !strings.Contains(msg, e) {
			t.Errorf("error exp: contains %q got: %s", e, msg)
		}
	}
	if strings.Contains(msg, "s3cret") {
		t.Fatalf("error exp: never the token got: %s", msg)
	}
}

// The agent refuses a bad file before it starts anything.
func TestAgent_BadConfigFileRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, filepath.Join(dir, "agent.hcl"), "server {\n  enabled = true\n  bootstrap_expect = -3\n}\n")
	code, _, errOut := runCLI("agent", "-config", path, "-data-dir", filepath.Join(dir, "data"))
	if code != 1 || !strings.Contains(errOut, path+":3: server.bootstrap_expect: must not be negative") {
		t.Fatalf("agent with a bad file exp: exit 1 naming %s:3 and server.bootstrap_expect got: %d %s", path, code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("data dir exp: never created got: %v", err)
	}
	code, _, errOut = runCLI("agent", "-config", filepath.Join(dir, "missing.hcl"))
	if code != 1 || !strings.Contains(errOut, "missing.hcl") {
		t.Fatalf("agent with a missing file exp: exit 1 naming it got: %d %s", code, errOut)
	}
}

// syncBuffer is a log destination the test reads while the logger writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lastLine is the last log line containing s.
func lastLine(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

func TestConfigReload_AppliesLiveKeysReportsRestartKeysRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.hcl")
	write := func(level, bind, ttl string) {
		writeFile(t, path, fmt.Sprintf("log_level = %q\nbind = %q\nserver {\n  heartbeat_ttl = %q\n  release_backoff_max = \"30s\"\n}\n", level, bind, ttl))
	}
	write("info", "127.0.0.1:0", "10s")
	var f agentFlags
	fs := testFlagSet(&f)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	files, err := loadAgentConfig(fs, &f, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	var logBuf syncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "claimd", Level: hclog.LevelFromString(f.logLevel), Output: &logBuf})
	// A real server, to see the new heartbeat TTL reach it.
	srv, err := server.New(server.Config{DataDir: filepath.Join(dir, "data"), BindAddr: "127.0.0.1:0",
		HeartbeatTTL: f.heartbeatTTL, RaftMultiplier: 0.2, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	targets := reloadTargets{logger: logger, srv: srv}
	named := logger.Named("server") // a sub-logger follows the root's level

	write("debug", "127.0.0.1:1", "30s")
	files.reload(targets)
	line := lastLine(logBuf.String(), "SIGHUP")
	for _, e := range []string{"configuration reloaded", "log_level=debug", "server.heartbeat_ttl=30s", "needs_restart=bind"} {
		if !strings.Contains(line, e) {
			t.Errorf("reload line exp: contains %q got: %q", e, line)
		}
	}
	if !named.IsDebug() {
		t.Errorf("named sub-logger after reload exp: debug got: %s", named.GetLevel())
	}
	if got := srv.HeartbeatTTL(); got != 30*time.Second {
		t.Errorf("server heartbeat TTL after reload exp: 30s got: %s", got)
	}
	if files.running.bind != "127.0.0.1:0" {
		t.Errorf("running bind exp: unchanged until a restart got: %q", files.running.bind)
	}

	// A file that does not parse: refused, the running configuration stays.
	writeFile(t, path, "log_level = \"error\"\nserver {\n  heartbeat_ttl = \"soon\"\n}\n")
	files.reload(targets)
	line = lastLine(logBuf.String(), "SIGHUP")
	if !strings.Contains(line, "configuration refused") || !strings.Contains(line, "server.heartbeat_ttl") {
		t.Errorf("reload of a bad file exp: refused naming server.heartbeat_ttl got: %q", line)
	}
	if !named.IsDebug() || srv.HeartbeatTTL() != 30*time.Second {
		t.Errorf("after a refused reload exp: debug and 30s kept got: %s %s", named.GetLevel(), srv.HeartbeatTTL())
	}

	// Unchanged files: nothing reloaded, and the bind still needs a restart.
	write("debug", "127.0.0.1:1", "30s")
	files.reload(targets)
	line = lastLine(logBuf.String(), "SIGHUP")
	if !strings.Contains(line, `reloaded="nothing changed"`) || !strings.Contains(line, "needs_restart=bind") {
		t.Errorf("reload of the same files exp: nothing changed, bind needs a restart got: %q", line)
	}
}

// The examples in docs/operations.md parse (they are what an operator copies).
func TestConfigFile_READMEExamplesParse(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```hcl\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	parsed := 0
	for i, b := range blocks {
		if !strings.Contains(b[1], "data_dir") { // an agent config, not an ACL policy
			continue
		}
		path := writeFile(t, filepath.Join(t.TempDir(), fmt.Sprintf("readme-%d.hcl", i)), b[1])
		if _, err := loadConfigFiles([]string{path}); err != nil {
			t.Errorf("docs/operations.md example %d exp: parses got: %v\n%s", i, err, b[1])
		}
		parsed++
	}
	if parsed < 2 {
		t.Fatalf("docs/operations.md exp: a server and a client config example got: %d", parsed)
	}
}

// The SIGHUP line's serial reads as openssl prints it (issue 30).
func TestSerialHex_AsOpenSSLPrintsIt(t *testing.T) {
	for in, want := range map[int64]string{255: "FF", 4096: "1000", 0x3a1f9: "03A1F9"} {
		if got := serialHex(big.NewInt(in)); got != want {
			t.Errorf("serialHex(%d) exp: %q got: %q", in, want, got)
		}
	}
}

// The sample configuration directories shipped in the release archives
// (packaging/config) load as the agent loads them (issue 29).
func TestConfigFile_PackagedSamplesLoad(t *testing.T) {
	for _, role := range []string{"server", "client"} {
		dir := filepath.Join("..", "..", "packaging", "config", role)
		cfg, err := loadConfigFiles([]string{dir})
		if err != nil {
			t.Fatalf("packaging/config/%s exp: loads got: %v", role, err)
		}
		if cfg == nil {
			t.Fatalf("packaging/config/%s exp: a configuration got: none", role)
		}
	}
}
