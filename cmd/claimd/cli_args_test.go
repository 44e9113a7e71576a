package main

import (
	"bytes"
	"strings"
	"testing"
)

// verbs lists every verb of the command table by its full name.
func verbs() [][]string {
	var out [][]string
	var walk func(prefix []string, table []command)
	walk = func(prefix []string, table []command) {
		for _, c := range table {
			name := append(append([]string{}, prefix...), c.name)
			if c.sub != nil {
				walk(name, c.sub)
			} else {
				out = append(out, name)
			}
		}
	}
	walk(nil, commands)
	return out
}

// Every verb refuses arguments it does not take, before it contacts a
// server: `node status ID extra` once printed every node. The address is
// one nothing listens on, so a verb that went ahead says so with a dial
// error instead of the refusal.
func TestCLI_ExtraArgumentsAreRefusedEverywhere(t *testing.T) {
	// Verbs that take any number of arguments, or run something else.
	takesMany := map[string]bool{
		"alloc stop": true, "agent": true, "bench": true, "csi-plugin hostdir": true,
		"completion": true, "volume register": true, "volume create": true, "acl policy apply": true,
	}
	extra := []string{"a1", "a2", "a3", "a4", "a5", "a6"}
	for _, v := range verbs() {
		name := strings.Join(v, " ")
		if takesMany[name] {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(append(append([]string{}, v...), extra...), "-address", "127.0.0.1:1", "-timeout", "2s")
			code := run(args, &stdout, &stderr)
			if code == 0 {
				t.Fatalf("exit 0 with six extra arguments; stdout %q", stdout.String())
			}
			if s := stderr.String(); strings.Contains(s, "127.0.0.1:1") || strings.Contains(s, "connection refused") {
				t.Fatalf("went ahead and called a server instead of refusing the arguments: %s", s)
			}
		})
	}
}

// Flags after the positional arguments are parsed, not taken for more
// arguments: `alloc status ID -json` is one allocation as JSON.
func TestCLI_FlagsAfterArgumentsAreParsed(t *testing.T) {
	for _, args := range [][]string{
		{"alloc", "status", "a1", "-json"},
		{"node", "status", "n1", "-json"},
		{"volume", "status", "pgdata", "-json"},
		{"plugin", "status", "hostdir", "-json"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(args, "-address", "127.0.0.1:1", "-timeout", "2s"), &stdout, &stderr)
		// Nothing listens: the verb went to the server with one ID,
		// which is what shows that -json was taken as a flag.
		if code != 1 || !strings.Contains(stderr.String(), "127.0.0.1:1") {
			t.Errorf("%v: exit %d, stderr %q: want a call to the server (the flag parsed, one ID)", args, code, stderr.String())
		}
	}
}

// `claimd alloc -h` lists the alloc verbs (it said "unknown command").
func TestCLI_GroupHelpListsItsVerbs(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"alloc", "-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("alloc -h: exit %d: %s", code, stderr.String())
	}
	out := stderr.String()
	if strings.Contains(out, "unknown command") || !strings.Contains(out, "alloc run") || strings.Contains(out, "volume status") {
		t.Fatalf("alloc -h printed:\n%s", out)
	}
	stderr.Reset()
	if code := run([]string{"alloc"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "alloc stop") {
		t.Fatalf("alloc: exit %d:\n%s", code, stderr.String())
	}
}
