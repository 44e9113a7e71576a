package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The bash completion, run by bash: each group completes to the words the
// command table gives it, a finished verb to nothing (files, by bash's
// default), and every verb of the table is reachable.
func TestCompletion_BashCompletesTheCommandTable(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	var out strings.Builder
	if code := runCompletion([]string{"bash"}, &out, &strings.Builder{}); code != 0 {
		t.Fatalf("completion bash exp: exit 0 got: %d", code)
	}
	// A claimd on PATH that answers the status -json the completion asks
	// for volume, node and allocation IDs, as a cluster would.
	fake := t.TempDir()
	stub := `#!/bin/sh
case "$1 $2 $3" in
"volume status -json") printf '[\n  {\n    "id": "pgdata",\n    "name": "postgres data",\n    "claims": {\n      "id": "nested"\n    }\n  },\n  {\n    "id": "scratch"\n  }\n]\n' ;;
"node status -json") printf '[\n  {\n    "id": "c844aad6-0000-4000-8000-000000000001",\n    "name": "worker1"\n  }\n]\n' ;;
"alloc status -json") printf '[\n  {\n    "id": "web1"\n  }\n]\n' ;;
esac
`
	if err := os.WriteFile(filepath.Join(fake, "claimd"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	complete := func(line ...string) string {
		t.Helper()
		words := "claimd"
		for _, w := range line {
			words += " '" + w + "'"
		}
		script := "PATH=" + fake + ":$PATH\n" + out.String() + "\nCOMP_WORDS=(" + words + "); COMP_CWORD=" + strconv.Itoa(len(line)) + "; _claimd; echo \"${COMPREPLY[*]}\"\n"
		b, err := exec.Command(bash, "--norc", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("bash exp: success got: %v\n%s", err, b)
		}
		return strings.TrimSpace(string(b))
	}
	for _, c := range []struct {
		line []string
		want string
	}{
		{[]string{"vo"}, "volume"},
		{[]string{"operator", "raft", ""}, "list-peers remove-peer transfer-leader health"},
		{[]string{"volume", "snapshot", "l"}, "list"},
		{[]string{"volume", "-json", "st"}, "status"},
		{[]string{"completion", ""}, "bash zsh"},
		{[]string{"volume", "register", ""}, ""},
		// Flags, from each verb's own flag set.
		{[]string{"alloc", "run", "-wa"}, "-wait -wait-timeout"},
		{[]string{"node", "drain", "-d"}, "-deadline -dry-run"},
		// IDs from the cluster: a verb's argument, and -node/-volume values.
		{[]string{"volume", "status", "p"}, "pgdata"},
		{[]string{"volume", "detach", "-force", "s"}, "scratch"},
		{[]string{"node", "drain", "-dry-run", "w"}, "worker1"},
		{[]string{"alloc", "run", "-node", "c8"}, "c844aad6-0000-4000-8000-000000000001"},
		{[]string{"alloc", "run", "-node", "worker1", "-volume", ""}, "pgdata scratch"},
		{[]string{"alloc", "stop", "w"}, "web1"},
	} {
		if got := complete(c.line...); got != c.want {
			t.Errorf("claimd %s<TAB> exp: %q got: %q", strings.Join(c.line, " "), c.want, got)
		}
	}
	// Every verb's full path completes from its group.
	var walk func(path []string, table []command)
	walk = func(path []string, table []command) {
		for _, c := range table {
			if c.sub != nil {
				walk(append(append([]string(nil), path...), c.name), c.sub)
				continue
			}
			line := append(append([]string(nil), path...), c.name)
			if got := complete(line...); !strings.Contains(" "+got+" ", " "+c.name+" ") {
				t.Errorf("claimd %s<TAB> exp: %q among got: %q", strings.Join(line, " "), c.name, got)
			}
		}
	}
	walk(nil, commands)

	var zsh strings.Builder
	if code := runCompletion([]string{"zsh"}, &zsh, &strings.Builder{}); code != 0 || !strings.Contains(zsh.String(), "bashcompinit") {
		t.Fatalf("completion zsh exp: the bash function through bashcompinit got: %d", code)
	}
	var errOut strings.Builder
	if code := runCompletion([]string{"fish"}, &strings.Builder{}, &errOut); code != 1 || !strings.Contains(errOut.String(), "bash|zsh") {
		t.Fatalf("completion fish exp: exit 1 with usage got: %d %q", code, errOut.String())
	}
}
