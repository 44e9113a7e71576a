package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
)

// `alloc run -wait` returns once the allocation runs, its volume mounted
// (and nodes and allocations are found by name and ID prefix, below):
// the "Creating volumes" walk-through wrote into the mount path right
// after `alloc run`, before the mount existed. A second writer on the
// single-node-writer volume waits, shows why, and gives up at
// -wait-timeout with the allocation still placed.
func TestCLI_AllocRunWaitReturnsOnceMounted(t *testing.T) {
	dev, env, _, _ := startDevAgent(t)
	var cliEnv []string
	for k, v := range env {
		cliEnv = append(cliEnv, k+"="+v)
	}
	cli := func(args ...string) harness.CLIResult { return harness.RunCLIEnv(t, cliEnv, args...) }
	devDir := regexp.MustCompile(`source (\S+)/dev\.env`).FindStringSubmatch(dev.Output())
	if devDir == nil {
		t.Fatalf("dev agent exp: a source line got: %s", dev.Output())
	}
	spec := filepath.Join(t.TempDir(), "volume.json")
	writeSpec(t, spec, `{"id": "pgdata", "external_id": "pgdata", "plugin_id": "hostdir",
  "access_mode": "single-node-writer", "attachment_mode": "file-system"}`)
	if r := cli("volume", "register", spec); r.Code != 0 {
		t.Fatalf("volume register: %+v", r)
	}
	var node string
	harness.WaitFor(t, 30*time.Second, func() error {
		r := cli("node", "status", "-json")
		m := regexp.MustCompile(`"id": "([0-9a-f-]{36})"`).FindStringSubmatch(r.Stdout)
		if m == nil {
			return fmt.Errorf("node status: %+v", r)
		}
		node = m[1]
		return nil
	})

	r := cli("alloc", "run", "-wait", "-node", node, "-volume", "pgdata", "-id", "web1")
	if r.Code != 0 || !strings.Contains(r.Stdout, `Allocation "web1" is running`) {
		t.Fatalf("alloc run -wait web1 exp: running got: %+v", r)
	}
	// At once, no polling: the mount is there when -wait returns.
	mount := filepath.Join(devDir[1], "client", "csi", "per-alloc", "web1", "pgdata", "rw-single-node-writer-file-system")
	if err := os.WriteFile(filepath.Join(mount, "hello"), []byte("hello\n"), 0o644); err != nil {
		t.Fatalf("write into the mount right after alloc run -wait: %v", err)
	}

	// web2 can never run while web1 holds the volume: any -wait-timeout
	// shows the timeout; 1 s (3 s before) is only how long that takes.
	r = cli("alloc", "run", "-wait", "-wait-timeout", "1s", "-node", node, "-volume", "pgdata", "-id", "web2")
	if r.Code != 1 || !strings.Contains(r.Stderr, `"web2" did not run within 1s`) || !strings.Contains(r.Stdout, "pending") {
		t.Fatalf("alloc run -wait web2 (volume held) exp: pending, then a timeout got: %+v", r)
	}
	if r := cli("alloc", "status", "web2", "-json"); r.Code != 0 || !strings.Contains(r.Stdout, `"web2"`) {
		t.Fatalf("web2 exp: still placed got: %+v", r)
	}

	// Nodes and allocations by what an operator sees: a node's name or
	// an ID prefix, an allocation's ID prefix; two matches list both.
	name := regexp.MustCompile(`"name": "([^"]+)"`).FindStringSubmatch(cli("node", "status", node, "-json").Stdout)
	if name == nil {
		t.Fatal("node status: no name")
	}
	for _, arg := range []string{name[1], node[:8]} {
		if r := cli("node", "status", arg, "-json"); r.Code != 0 || !strings.Contains(r.Stdout, `"id": "`+node+`"`) {
			t.Fatalf("node status %s exp: node %s got: %+v", arg, node, r)
		}
	}
	if r := cli("alloc", "status", "-node", node[:8], "-json"); r.Code != 0 || !strings.Contains(r.Stdout, `"web1"`) {
		t.Fatalf("alloc status -node PREFIX exp: web1 listed got: %+v", r)
	}
	r = cli("alloc", "status", "web")
	if r.Code != 1 || !strings.Contains(r.Stderr, `"web" names 2 allocations`) || !strings.Contains(r.Stderr, "web1") || !strings.Contains(r.Stderr, "web2") {
		t.Fatalf("alloc status web exp: ambiguous, both listed got: %+v", r)
	}
	// The agent's build, for watching a rolling upgrade of the clients.
	ver := regexp.MustCompile(`"version": "([^"]+)"`).FindStringSubmatch(cli("version", "-json").Stdout)
	if r := cli("node", "status"); ver == nil || !strings.Contains(r.Stdout, "Version") || !strings.Contains(r.Stdout, ver[1]) {
		t.Fatalf("node status exp: a Version column with %v got: %+v", ver, r)
	}
	if r := cli("alloc", "stop", "web2"); r.Code != 0 {
		t.Fatalf("alloc stop web2: %+v", r)
	}
}
