package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A negative -own-detach-timeout is refused at start, naming the field,
// before the agent writes anything.
func TestAgent_NegativeOwnDetachTimeoutIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	code := runAgent([]string{"-client", "-servers", "127.0.0.1:1", "-data-dir", dir,
		"-own-detach-timeout", "-1s", "-http-addr", "off"}, &out, &errb)
	if want := "own_detach_timeout: -1s is negative"; code != 1 || !strings.Contains(errb.String(), want) {
		t.Fatalf("-own-detach-timeout -1s exp: exit 1 naming %q got: %d %q", want, code, errb.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("-own-detach-timeout -1s exp: nothing written got: data dir %v", err)
	}
}
