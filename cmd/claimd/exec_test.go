package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad input to exec and keeper is refused with an error naming the flag,
// before anything is started or written.
func TestExecAndKeeperRefuseBadFlags(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cases := []struct {
		name string
		run  func([]string, *strings.Builder, *strings.Builder) int
		args []string
		want string
	}{
		{"exec without -alloc", execRunner, []string{"--", "true"}, "-alloc: required"},
		{"exec without a command", execRunner, []string{"-alloc", "a1"}, "no command to run"},
		{"exec with both file flags", execRunner, []string{"-alloc", "a1", "-data-dir", dir, "-lease-file", "x", "--", "true"}, "-data-dir and -lease-file: give one"},
		{"exec negative grace", execRunner, []string{"-alloc", "a1", "-kill-grace", "-1s", "--", "true"}, "-kill-grace: -1s is negative"},
		{"exec negative wait", execRunner, []string{"-alloc", "a1", "-wait", "-1s", "--", "true"}, "-wait: -1s is negative"},
		{"keeper without a command", keeperRunner, []string{"-state-dir", state}, "-fence-command: required"},
		{"keeper negative timeout", keeperRunner, []string{"-fence-command", "true", "-fence-timeout", "-1s", "-state-dir", state}, "-fence-timeout: -1s is negative"},
		{"keeper bad log level", keeperRunner, []string{"-fence-command", "true", "-log-level", "loud", "-state-dir", state}, `-log-level: "loud"`},
		{"keeper stray argument", keeperRunner, []string{"-fence-command", "true", "-state-dir", state, "extra"}, `unexpected argument "extra"`},
	}
	for _, c := range cases {
		var out, errb strings.Builder
		if code := c.run(c.args, &out, &errb); code != 1 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s exp: exit 1 with %q got: %d %q", c.name, c.want, code, errb.String())
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("keeper refused exp: no state dir made got: %v", err)
	}
}

func execRunner(args []string, out, errb *strings.Builder) int   { return runExec(args, out, errb) }
func keeperRunner(args []string, out, errb *strings.Builder) int { return runKeeper(args, out, errb) }
