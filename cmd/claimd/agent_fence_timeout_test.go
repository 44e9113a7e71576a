package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A -fence-timeout that does not fit in the fence budget is refused at
// start with the field, the value and the budget named, before the agent
// writes anything, as is a negative one.
func TestAgent_FenceTimeoutOutsideTheBudgetIsRefused(t *testing.T) {
	for _, tc := range []struct {
		timeout, want string
	}{
		{"2s", "fence_timeout: 2s is not below the fence budget 1s"},
		{"-1s", "fence_timeout: -1s is negative"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		var out, errb bytes.Buffer
		code := runAgent([]string{"-client", "-servers", "127.0.0.1:1", "-data-dir", dir, "-node-lease", "4s",
			"-fence-timeout", tc.timeout, "-http-addr", "off"}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Fatalf("-fence-timeout %s exp: exit 1 naming %q got: %d %q", tc.timeout, tc.want, code, errb.String())
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("-fence-timeout %s exp: nothing written got: data dir %v", tc.timeout, err)
		}
	}
}
