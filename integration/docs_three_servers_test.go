package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
)

// operations.md's three servers on one machine, run as written but for
// the data dirs and ports (a test takes free ones): three background
// agents, a wait for raft health, and list-peers showing the three.
func TestDocs_ThreeServersOnOneMachine(t *testing.T) {
	block := docBlock(t, "../docs/operations.md", "<!-- three-servers-one-machine -->")
	dir := t.TempDir()
	repl := []string{"/tmp/s", filepath.Join(dir, "s")}
	var first string
	for _, port := range []string{"4647", "5647", "6647", "4646", "5646", "6646"} {
		addr := harness.FreeAddr(t)
		if first == "" {
			first = addr
		}
		repl = append(repl, "127.0.0.1:"+port, addr)
	}
	script := strings.NewReplacer(repl...).Replace(block)
	cmd := exec.Command("bash", "-c", "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\nPATH="+
		filepath.Dir(harness.Binary(t))+":$PATH\n"+script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CLAIMD_ADDR="+first)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the three-server walk-through failed: %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the three-server walk-through did not finish within 2 minutes:\n%s", out.String())
	}
	// list-peers' rows: Node, ID, Address, State, Voter, Version.
	peers := len(regexp.MustCompile(`(?m)^\S+\s+[0-9a-f-]{36}\s+127\.0\.0\.1:\d+\s+(leader|follower)\s+true\b`).FindAllString(out.String(), -1))
	if peers != 3 {
		t.Fatalf("list-peers exp: three servers got %d:\n%s", peers, out.String())
	}
}
