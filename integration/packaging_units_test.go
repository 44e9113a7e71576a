package integration

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/fencewatch"
)

// sdUnit is a systemd unit as section → key → values (continuation
// lines joined; a key may repeat).
type sdUnit map[string]map[string][]string

func readSystemdUnit(t *testing.T, name string) sdUnit {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "packaging", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := sdUnit{}
	section, pending := "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line, pending = pending+" "+line, ""
		}
		if strings.HasSuffix(line, "\\") {
			pending = strings.TrimSuffix(line, "\\")
			continue
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, _ := strings.Cut(line, "=")
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u sdUnit) one(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// The units keep the fence's promise (issue 39): the agent restarts
// always and is never given up on; the keeper restarts always, is not
// stopped with the agent, and reads the lease file where the packaged
// agent writes it; the workload example runs through claimd exec and is
// not started again on the node after a fence or a release.
func TestPackaging_UnitsKeepTheFence(t *testing.T) {
	client := readSystemdUnit(t, "claimd-client.service")
	keeper := readSystemdUnit(t, "claimd-keeper.service")
	workload := readSystemdUnit(t, "claimd-workload@.service")
	for name, u := range map[string]sdUnit{"client": client, "keeper": keeper} {
		if u.one("Service", "Restart") != "always" || u.one("Unit", "StartLimitIntervalSec") != "0" || u.one("Service", "RestartSec") == "" {
			t.Errorf("%s unit exp: Restart=always, StartLimitIntervalSec=0, a RestartSec got: %v", name, u)
		}
	}
	for _, key := range []string{"BindsTo", "PartOf", "Requires", "Requisite"} {
		for name, u := range map[string]sdUnit{"keeper": keeper, "workload": workload} {
			if v := u.one("Unit", key); strings.Contains(v, "claimd-client") {
				t.Errorf("%s unit exp: not stopped with the agent got: %s=%s", name, key, v)
			}
		}
	}
	// The packaged agent's data dir is where exec and the keeper look.
	hcl, err := os.ReadFile(filepath.Join("..", "packaging", "config", "client", "client.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^data_dir\s*=\s*"([^"]+)"`).FindSubmatch(hcl)
	if m == nil || string(m[1]) != fencewatch.DefaultDataDir {
		t.Fatalf("client.hcl data_dir exp: %s (exec and keeper's default) got: %q", fencewatch.DefaultDataDir, m)
	}
	if got := keeper.one("Service", "ExecStart"); !strings.Contains(got, "claimd keeper -data-dir "+fencewatch.DefaultDataDir) ||
		!strings.Contains(got, "-fence-command ${FENCE_COMMAND}") || !strings.Contains(got, "-state-dir /var/lib/"+keeper.one("Service", "StateDirectory")) {
		t.Errorf("keeper ExecStart exp: claimd keeper on the agent's data dir, its state dir, the fence command got: %q", got)
	}
	if got := workload.one("Service", "ExecStart"); !strings.Contains(got, "claimd exec -alloc %i -data-dir "+fencewatch.DefaultDataDir+" ") {
		t.Errorf("workload ExecStart exp: through claimd exec got: %q", got)
	}
	if got := workload.one("Service", "RestartPreventExitStatus"); got != "3 4" {
		t.Errorf("workload exp: not restarted after a fence (3) or a release (4) got: RestartPreventExitStatus=%q", got)
	}
}
