package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/telemetry"
)

// Volume usage (issue 27): `volume status`, the API and HTTP ask the node
// holding a claim for the volume's usage at its mount (NodeGetVolumeStats
// over the node's session) — what a workload wrote through the mount shows
// up, per node and allocation; a volume nobody holds has no usage to ask.
//
// The agent also measures what it holds on its own and serves it as the
// claimd.client.volume.* gauges.
func TestVolumeUsage_NodeReportsWhatTheWorkloadWrote(t *testing.T) {
	tel, err := telemetry.Setup(telemetry.Config{ServiceName: "claimd", DisableHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	e := newReleaseEnvOpts(t, harness.Options{ConfigureClient: func(cfg *client.Config) {
		cfg.UsageInterval = 200 * time.Millisecond
	}}, nil, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.register(t, "v2", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)

	const size = 1 << 20
	mount := mountPath(t, e.clients["w1"], "a1", "v1")
	if err := os.WriteFile(filepath.Join(mount, "data"), bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
		t.Fatal(err)
	}

	usage, err := e.api.VolumeUsage(harness.Ctx(t, 30*time.Second), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 {
		t.Fatalf("usage entries exp: 1 (one live claim) got: %d %+v", len(usage), usage)
	}
	u := usage[0]
	if u.Error != "" || u.NodeID != e.clients["w1"].NodeID() || u.AllocID != "a1" {
		t.Fatalf("usage exp: w1/a1 without error got: %+v", u)
	}
	if u.BytesUsed < size || u.BytesTotal < u.BytesUsed {
		t.Fatalf("usage exp: used >= %d <= total got: used %d total %d", size, u.BytesUsed, u.BytesTotal)
	}

	// A volume nobody holds: nothing to ask, no error.
	if usage, err := e.api.VolumeUsage(harness.Ctx(t, 30*time.Second), "v2"); err != nil || len(usage) != 0 {
		t.Fatalf("usage of an unclaimed volume exp: none got: %+v %v", usage, err)
	}
	// An unknown volume is an error that names it.
	if _, err := e.api.VolumeUsage(harness.Ctx(t, 30*time.Second), "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("usage of an unknown volume exp: error naming it got: %v", err)
	}

	// The agent's gauges, by volume and allocation.
	harness.WaitFor(t, 30*time.Second, func() error {
		used, ok := scrapeProm(t, tel).value("claimd_client_volume_bytes_used", map[string]string{"volume": "v1", "alloc": "a1", "plugin": "hostdir"})
		if !ok || used < size {
			return fmt.Errorf("claimd.client.volume.bytes_used{v1,a1} exp: >= %d got: %v (present %v)", size, used, ok)
		}
		return nil
	})

	// The CLI shows it in volume status.
	r := harness.RunCLIEnv(t, e.cliEnv(t), "volume", "status", "v1")
	shown := false
	for _, l := range strings.Split(r.Stdout, "\n") {
		// The Usage table's row: node, alloc, bytes used, ...
		if f := strings.Fields(l); len(f) >= 3 && f[0] == e.clients["w1"].NodeID() && f[1] == "a1" {
			used, err := strconv.ParseInt(f[2], 10, 64)
			shown = shown || err == nil && used >= size
		}
	}
	if r.Code != 0 || !strings.Contains(r.Stdout, "Inodes Used") || !shown {
		t.Fatalf("volume status exp: a Usage row for a1 on w1 with >= %d bytes used got: %d\n%s%s", size, r.Code, r.Stdout, r.Stderr)
	}
}
