package main

import (
	"bytes"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// lockedWriter is a buffer the agent's goroutines write to and the test
// reads.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startTestAgent parses args as `claimd agent` would and starts the agent
// (start returns once every part asked for runs); the caller stops it,
// also after an error. It returns what the agent printed and logged.
func startTestAgent(t *testing.T, args ...string) (*agent, *lockedWriter, *lockedWriter, error) {
	t.Helper()
	var f agentFlags
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defineAgentFlags(fs, &f)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	stdout, logs := &lockedWriter{}, &lockedWriter{}
	logger, err := newAgentLogger(&f, logs)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{f: f, logger: logger, stdout: stdout}
	return a, stdout, logs, a.start()
}

// freeAddr is a loopback address with a port no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// `claimd agent -dev` says where dev.env is and never shows the management
// token: dev.env (mode 0600) is the one place it is written, as the README
// says. Neither what the agent prints nor its log holds the token.
func TestDevAgent_PrintsWhereDevEnvIsNotTheToken(t *testing.T) {
	dataDir := t.TempDir()
	a, stdout, logs, err := startTestAgent(t, "-dev", "-data-dir", dataDir, "-bind", freeAddr(t), "-http-addr", freeAddr(t),
		"-raft-multiplier", "0.2", "-log-level", "debug")
	a.stop()
	if err != nil {
		t.Fatalf("dev agent exp: started got: %v\n%s", err, logs.String())
	}

	envFile := filepath.Join(dataDir, "dev.env")
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(envFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev.env mode exp: 0600 got: %v %v", fi.Mode(), err)
	}
	var token string
	for _, kv := range strings.Fields(string(env)) {
		if v, ok := strings.CutPrefix(kv, "CLAIMD_TOKEN="); ok {
			token = v
		}
	}
	if len(token) < 16 {
		t.Fatalf("dev.env exp: CLAIMD_TOKEN with the management token got: a value of %d characters", len(token))
	}
	out := stdout.String()
	if !strings.Contains(out, "source "+envFile) {
		t.Fatalf("dev agent output exp: a line \"source %s\" got: %q", envFile, out)
	}
	// The messages never show the token itself, even when the test fails.
	if strings.Contains(out, token) {
		t.Fatalf("dev agent output exp: no management token got: the token of dev.env in the output")
	}
	if strings.Contains(logs.String(), token) {
		t.Fatalf("dev agent log exp: no management token got: the token of dev.env in the log")
	}
}
