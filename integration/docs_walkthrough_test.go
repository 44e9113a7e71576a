package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
)

// shBlocks returns the ```sh blocks of a doc's section (from the heading
// to the next heading of the same level).
func shBlocks(t *testing.T, doc, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s: no section %q", doc, heading)
	}
	text = text[i+len(heading)+2:]
	level := heading[:strings.Index(heading, " ")+1]
	if j := strings.Index(text, "\n"+level); j >= 0 {
		text = text[:j]
	}
	var blocks []string
	for {
		start := strings.Index(text, "```sh\n")
		if start < 0 {
			return blocks
		}
		text = text[start+6:]
		end := strings.Index(text, "```\n")
		blocks = append(blocks, text[:end])
		text = text[end:]
	}
}

// asScript makes a doc block a script that stops at the first command
// that fails, where a line marked "# refused" must fail instead.
func asScript(block string) string {
	var out []string
	for _, line := range strings.Split(block, "\n") {
		if cmd, _, ok := strings.Cut(line, "# refused"); ok && strings.TrimSpace(cmd) != "" {
			line = "if " + cmd + "; then echo 'doc line succeeded, the docs say refused: " + strings.ReplaceAll(line, "'", "") + "'; exit 97; fi"
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// The README's quick start, then operations.md's "Creating volumes"
// walk-throughs, run as written in one shell against a dev agent (as the
// docs say to): every command must succeed but those the docs say are
// refused, which must fail. They had drifted: a walk-through wrote into a
// mount before it existed, resized a spec file it never made, stopped an
// allocation it never ran, and deleted volumes still being released.
func TestDocs_WalkthroughsRunAsWritten(t *testing.T) {
	dev, env, _, _ := startDevAgent(t)
	m := regexp.MustCompile(`source (\S+)/dev\.env`).FindStringSubmatch(dev.Output())
	if m == nil {
		t.Fatalf("dev agent printed no source line: %s", dev.Output())
	}
	devDir := m[1]
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "docs"), filepath.Join(dir, "docs")); err != nil {
		t.Fatal(err)
	}
	var script []string
	script = append(script, "set -euo pipefail", "PATH="+filepath.Dir(harness.Binary(t))+":$PATH")
	quick := shBlocks(t, filepath.Join(root, "README.md"), "## Quick start")
	var readme string
	for _, b := range quick {
		if strings.Contains(b, "claimd volume register") {
			readme = b
		}
	}
	if readme == "" {
		t.Fatal("README quick start: no block with the walk-through")
	}
	readme = strings.ReplaceAll(readme, "/tmp/claimd-dev-XXXX", devDir)
	readme = regexp.MustCompile(`(?m)^go install .*$`).ReplaceAllString(readme, ": the CLI is on PATH")
	script = append(script, asScript(readme))
	for _, b := range shBlocks(t, filepath.Join(root, "docs", "operations.md"), "## Creating volumes") {
		b = strings.ReplaceAll(b, "DEV=/tmp/claimd-dev-XXXX", "DEV="+devDir)
		script = append(script, asScript(b))
	}
	cmd := exec.Command("bash", "-c", strings.Join(script, "\n"))
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the walk-throughs did not finish within 5 minutes:\n%s", out)
	}
	if err != nil {
		t.Fatalf("the walk-throughs as written failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "hello") {
		t.Fatalf("the restored volume exp: the snapshot's hello got:\n%s", out)
	}
}
