package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/internal/mountinfo"
	"github.com/claimd/claimd/structs"
)

// peersTable runs list-peers against addr and returns the rows (without
// the header) when it succeeds.
func peersTable(t *testing.T, addr string, stale bool) ([][]string, error) {
	args := []string{"operator", "raft", "list-peers", "-address", addr, "-timeout", "5s"}
	if stale {
		args = append(args, "-stale")
	}
	r := harness.RunCLI(t, args...)
	if r.Code != 0 {
		return nil, fmt.Errorf("list-peers exit %d: %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "Node") {
		return nil, fmt.Errorf("list-peers exp: table with header got: %q", r.Stdout)
	}
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Fields(l))
	}
	return rows, nil
}

// leaderRow returns the address of the leader in a list-peers table
// (Node ID Address State Voter Version; a version may hold spaces).
func leaderRow(rows [][]string) string {
	for _, r := range rows {
		if len(r) >= 6 && r[3] == "leader" {
			return r[2]
		}
	}
	return ""
}

func TestProcesses_ThreeServersFormClusterAndSurviveLeaderKill(t *testing.T) {
	dir := t.TempDir()
	addrs := []string{harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)}
	procs := map[string]*harness.Process{}
	// Start in reverse order: the order must not matter.
	for i := 2; i >= 0; i-- {
		name := fmt.Sprintf("s%d", i+1)
		procs[addrs[i]] = harness.StartProcess(t, name, "agent", "-server",
			"-bootstrap-expect", "3", "-join", harness.JoinOthers(addrs, i),
			"-bind", addrs[i], "-data-dir", filepath.Join(dir, name), "-node-name", name,
			"-raft-multiplier", "0.2", "-log-level", "debug")
	}
	var leader string
	harness.WaitFor(t, 30*time.Second, func() error {
		rows, err := peersTable(t, addrs[0], false)
		if err != nil {
			return err
		}
		if len(rows) != 3 {
			return fmt.Errorf("peers exp: 3 got: %d", len(rows))
		}
		if leader = leaderRow(rows); leader == "" {
			return fmt.Errorf("no leader in %v", rows)
		}
		return nil
	})

	// Register through a follower with the CLI.
	var follower string
	for _, a := range addrs {
		if a != leader {
			follower = a
			break
		}
	}
	spec := filepath.Join(dir, "vol.json")
	writeSpec(t, spec, `{"id":"pgdata","name":"postgres data","external_id":"pgdata","plugin_id":"hostdir",
		"access_mode":"single-node-writer","attachment_mode":"file-system",
		"mount_options":{"fs_type":"ext4","mount_flags":["noatime"]},
		"parameters":{"tier":"fast"},"context":{},"secrets":{"token":"never-printed"}}`)
	if r := harness.RunCLI(t, "volume", "register", "-address", follower, spec); r.Code != 0 {
		t.Fatalf("volume register exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}

	// Kill -9 the leader: a new one is elected and the write survives.
	procs[leader].Kill()
	var newLeader string
	harness.WaitFor(t, 30*time.Second, func() error {
		rows, err := peersTable(t, follower, false)
		if err != nil {
			return err
		}
		if newLeader = leaderRow(rows); newLeader == "" || newLeader == leader {
			return fmt.Errorf("no new leader yet: %v", rows)
		}
		return nil
	})
	r := harness.RunCLI(t, "volume", "status", "-json", "-address", follower, "pgdata")
	if r.Code != 0 {
		t.Fatalf("volume status exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	if strings.Contains(r.Stdout, "never-printed") {
		t.Fatalf("volume status exp: secret hidden got: %s", r.Stdout)
	}
	var vol structs.Volume
	if err := json.Unmarshal([]byte(r.Stdout), &vol); err != nil || vol.ID != "pgdata" || vol.MountOptions.FSType != "ext4" {
		t.Fatalf("volume status -json exp: pgdata with ext4 got: %+v %v", vol, err)
	}

	// The killed server restarts on its data dir and catches up: its own
	// stale view shows the volume.
	procs[leader].Restart()
	harness.WaitFor(t, 30*time.Second, func() error {
		r := harness.RunCLI(t, "volume", "status", "-stale", "-address", leader, "-timeout", "5s")
		if r.Code != 0 || !strings.Contains(r.Stdout, "pgdata") {
			return fmt.Errorf("restarted server exp: pgdata got: %d %q %q", r.Code, r.Stdout, r.Stderr)
		}
		return nil
	})
}

func TestProcesses_DevAgentAndCLIErrors(t *testing.T) {
	addr := harness.FreeAddr(t)
	dev := harness.StartProcess(t, "dev", "agent", "-dev", "-bind", addr, "-raft-multiplier", "0.2")
	// The dev agent runs with TLS and ACLs and says where the CLI's
	// environment (CA, cli certificate, management token) is: dev.env,
	// the one place the token is written (devEnv checks the output does
	// not show it).
	var env []string
	for k, v := range devEnv(t, dev) {
		env = append(env, k+"="+v)
	}
	cli := func(args ...string) harness.CLIResult { return harness.RunCLIEnv(t, env, args...) }
	harness.WaitFor(t, 30*time.Second, func() error {
		r := cli("operator", "raft", "list-peers", "-address", addr)
		if r.Code != 0 || !strings.Contains(r.Stdout, addr) || !strings.Contains(r.Stdout, "leader") {
			return fmt.Errorf("dev agent exp: leader at %s got: %d %q %q", addr, r.Code, r.Stdout, r.Stderr)
		}
		return nil
	})
	// Without the environment the CLI is refused: plaintext to a TLS port,
	// and it says what to set (issue 30).
	if r := harness.RunCLI(t, "volume", "status", "-address", addr); r.Code != 1 || !strings.Contains(r.Stderr, "may require TLS") ||
		!strings.Contains(r.Stderr, "CLAIMD_CACERT") {
		t.Fatalf("CLI without TLS against the dev agent exp: exit 1 naming CLAIMD_CACERT got: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	// Nothing listening: said once, without the TLS hint.
	if r := harness.RunCLI(t, "volume", "status", "-address", harness.FreeAddr(t), "-timeout", "3s"); r.Code != 1 ||
		strings.Count(r.Stderr, "unavailable:") != 1 || strings.Contains(r.Stderr, "may require TLS") {
		t.Fatalf("CLI to nothing exp: exit 1, one unavailable, no TLS hint got: %d %q", r.Code, r.Stderr)
	}

	cases := []struct {
		name, spec, wantErr string
	}{
		{"bad access mode", `{"id":"v1","external_id":"e","plugin_id":"p","access_mode":"everyone","attachment_mode":"file-system"}`, "access_mode"},
		{"missing id", `{"external_id":"e","plugin_id":"p","access_mode":"single-node-writer","attachment_mode":"file-system"}`, "id: must not be empty"},
		{"unknown field", `{"id":"v1","externalid":"e"}`, "externalid"},
		{"not json", `id = v1`, "vol.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := filepath.Join(t.TempDir(), "vol.json")
			writeSpec(t, spec, tc.spec)
			r := cli("volume", "register", "-address", addr, spec)
			if r.Code != 1 || !strings.Contains(r.Stderr, tc.wantErr) {
				t.Fatalf("exp: exit 1 naming %q got: %d %q", tc.wantErr, r.Code, r.Stderr)
			}
		})
	}
	r := cli("volume", "status", "-address", addr, "nope")
	if r.Code != 1 || !strings.Contains(r.Stderr, "not_found") {
		t.Fatalf("status of unknown volume exp: exit 1 not_found got: %d %q", r.Code, r.Stderr)
	}
	r = cli("volume", "status", "-address", addr)
	if r.Code != 0 || !strings.Contains(r.Stdout, "No volumes") {
		t.Fatalf("status exp: No volumes got: %d %q", r.Code, r.Stdout)
	}
	r = cli("volume", "deregister", "-address", addr, "nope")
	if r.Code != 1 || !strings.Contains(r.Stderr, "not_found") {
		t.Fatalf("deregister unknown exp: exit 1 not_found got: %d %q", r.Code, r.Stderr)
	}
	r = harness.RunCLI(t, "no-such-command")
	if r.Code != 1 {
		t.Fatalf("unknown command exp: exit 1 got: %d", r.Code)
	}
	// SIGTERM stops the dev agent cleanly.
	if err := dev.Signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

func writeSpec(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The dev agent stopped with an allocation running unmounts its volume
// and removes the temporary directory it made (issue 30: the bind mount
// stayed, the directory could not be removed, and every dev run left a
// /tmp/claimd-dev-* behind).
func TestProcesses_DevAgentStopUnmountsAndRemovesItsDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the dev agent's plugin mounts: needs root")
	}
	addr := harness.FreeAddr(t)
	dev := harness.StartProcess(t, "dev", "agent", "-dev", "-bind", addr, "-raft-multiplier", "0.2")
	var env []string
	for k, v := range devEnv(t, dev) {
		env = append(env, k+"="+v)
	}
	env = append(env, "CLAIMD_ADDR="+addr)
	cli := func(args ...string) harness.CLIResult { return harness.RunCLIEnv(t, env, args...) }
	var dir string
	for _, line := range strings.Split(dev.Output(), "\n") {
		if _, rest, ok := strings.Cut(line, "data-dir="); ok && strings.Contains(line, "claimd server running") {
			dir = strings.Fields(rest)[0]
		}
	}
	if !strings.Contains(dir, "claimd-dev-") {
		t.Fatalf("dev agent exp: its temporary data dir named got: %q\n%s", dir, dev.Output())
	}
	spec := filepath.Join(t.TempDir(), "v.json")
	writeSpec(t, spec, `{"id":"devvol","external_id":"devvol","plugin_id":"hostdir",
		"access_mode":"single-node-writer","attachment_mode":"file-system"}`)
	var nodeID string
	harness.WaitFor(t, 30*time.Second, func() error {
		if r := cli("volume", "register", spec); r.Code != 0 {
			return fmt.Errorf("register: %d %s", r.Code, r.Stderr)
		}
		r := cli("node", "status", "-json")
		var nodes []structs.Node
		if err := json.Unmarshal([]byte(r.Stdout), &nodes); err != nil || len(nodes) != 1 {
			return fmt.Errorf("node status: %v %s", err, r.Stdout)
		}
		nodeID = nodes[0].ID
		return nil
	})
	if r := cli("alloc", "run", "-node", nodeID, "-volume", "devvol", "-id", "web1"); r.Code != 0 {
		t.Fatalf("alloc run exp: exit 0 got: %d %s", r.Code, r.Stderr)
	}
	mounted := func() []string {
		points, err := mountinfo.Under(dir)
		if err != nil && !os.IsNotExist(err) { // gone: nothing can be mounted under it
			t.Fatal(err)
		}
		return points
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		if len(mounted()) == 0 {
			return fmt.Errorf("web1's volume exp: mounted under %s got: nothing yet", dir)
		}
		return nil
	})
	if err := dev.Signal(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if m := mounted(); len(m) != 0 {
		t.Fatalf("after the dev agent stopped exp: no mounts under %s got: %v", dir, m)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dev data dir exp: removed got: %v", err)
	}
	if !strings.Contains(dev.Output(), "unmounted 1 volume(s) and removed "+dir) &&
		!strings.Contains(dev.Output(), "unmounted 2 volume(s) and removed "+dir) {
		t.Fatalf("dev agent exp: says what it removed got:\n%s", dev.Output())
	}
}
