package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docBlock is the first ```sh block after marker in a doc.
func docBlock(t *testing.T, doc, marker string) string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("%s: no %s", doc, marker)
	}
	text = text[i:]
	start := strings.Index(text, "```sh\n")
	end := strings.Index(text[start+6:], "```\n")
	if start < 0 || end < 0 {
		t.Fatalf("%s: no sh block after %s", doc, marker)
	}
	return text[start+6 : start+6+end]
}

// The headless-browser recipe of operations.md ("The web UI") runs as
// written against a dev agent and shows the data, not "Loading…": the
// command the docs gave before hung (a blocking query kept the network
// busy) and needed --no-sandbox as root.
func TestDocs_HeadlessUIRecipe(t *testing.T) {
	var missing []string
	for _, tool := range []string{"chromium", "certutil", "pk12util", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		if os.Getenv("CLAIMD_BROWSER_REQUIRED") != "" {
			t.Fatalf("missing %v with CLAIMD_BROWSER_REQUIRED set", missing)
		}
		t.Skipf("missing %v (CI's .ci/run installs them)", missing)
	}
	recipe := docBlock(t, "../docs/operations.md", "<!-- headless-ui-recipe -->")
	_, env, url, token := startDevAgent(t)
	spec := filepath.Join(t.TempDir(), "volume.json")
	writeSpec(t, spec, `{"id": "pgdata", "external_id": "pgdata", "plugin_id": "hostdir",
  "access_mode": "single-node-writer", "attachment_mode": "file-system"}`)
	if r := runCurl(t, env, "-H", token, "-H", jsonType, "-X", "PUT", "--data-binary", "@"+spec, url+"/v1/volume/pgdata"); r.status != 200 {
		t.Fatalf("register: %s", r)
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", recipe)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HTTP="+url)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the recipe did not finish within 120 s (it hangs):\n%s", out)
	}
	if err != nil {
		t.Fatalf("the recipe failed: %v\n%s", err, out)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "volumes.html"))
	if !strings.Contains(string(html), `data-volume="pgdata"`) {
		t.Fatalf("volumes.html exp: the pgdata row got:\n%s", html)
	}
	if strings.Contains(string(html), env["CLAIMD_TOKEN"]) {
		t.Fatal("volumes.html holds the token")
	}
	if st, err := os.Stat(filepath.Join(dir, "volumes.png")); err != nil || st.Size() < 1000 {
		t.Fatalf("volumes.png exp: a screenshot got: %v %v", st, err)
	}
}
