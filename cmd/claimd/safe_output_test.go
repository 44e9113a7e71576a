package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"text/tabwriter"
)

// hostile is what a node's agent could have stored before the servers
// sanitised node text: set the window title, clear the screen, paint the
// rest red, an 8-bit CSI, a bidi override, a carriage return.
const hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[31mnode-1\u009b0m\u202egnp.exe\rX"

// rawTerminalBytes reports the first raw control a terminal would act on.
func rawTerminalBytes(s string) string {
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e"} {
		if strings.Contains(s, bad) {
			return fmt.Sprintf("%q", bad)
		}
	}
	return ""
}

// Every command's output goes through runEscaped (run dispatches to it):
// a table printed from hostile server data reaches stdout with its
// controls visible and inert, its layout (tabs aligned by tabwriter,
// newlines) intact; stderr likewise.
func TestRunEscaped_TablesAndErrorsShowControlsVisibly(t *testing.T) {
	c := &command{name: "status", run: func(args []string, stdout, stderr io.Writer) int {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tName")
		fmt.Fprintf(tw, "%s\t%s\n", "n1", hostile)
		tw.Flush()
		return fail(stderr, "node %s: %v", hostile, fmt.Errorf("plugin said %s", hostile))
	}}
	var out, errb bytes.Buffer
	if code := runEscaped(c, "node", nil, &out, &errb); code != 1 {
		t.Fatalf("exit code exp: 1 got: %d", code)
	}
	for name, s := range map[string]string{"stdout": out.String(), "stderr": errb.String()} {
		if bad := rawTerminalBytes(s); bad != "" {
			t.Errorf("%s exp: no raw terminal control got: %s in %q", name, bad, s)
		}
		if !strings.Contains(s, `\x1b]0;pwned\x07\x1b[2J\x1b[31mnode-1\u009b0m\u202egnp.exe\rX`) {
			t.Errorf("%s exp: the controls shown as escapes got: %q", name, s)
		}
	}
	if lines := strings.Split(out.String(), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], "n1  ") {
		t.Errorf("stdout exp: two table lines, tab-aligned got: %q", out.String())
	}
}

// The agent and the plugin print their log unchanged (their output is not
// the CLI's).
func TestRunEscaped_AgentOutputIsItsOwn(t *testing.T) {
	c := &command{name: "agent", run: func(args []string, stdout, stderr io.Writer) int {
		fmt.Fprint(stderr, "log \x1b[0m")
		return 0
	}}
	var out, errb bytes.Buffer
	runEscaped(c, "agent", nil, &out, &errb)
	if errb.String() != "log \x1b[0m" {
		t.Fatalf("agent output exp: unchanged got: %q", errb.String())
	}
}

// A UTF-8 character split across two writes passes whole; a C1 control
// split the same way is still escaped; a byte left incomplete at the end
// is escaped on Flush.
func TestSafeWriter_CharactersSplitAcrossWrites(t *testing.T) {
	var out bytes.Buffer
	w := newSafeWriter(&out)
	for _, part := range [][]byte{[]byte("卷"[:1]), []byte("卷"[1:] + "ok"), {0xc2}, {0x9b}, []byte("2J é"), {0xe5, 0x8d}} {
		if n, err := w.Write(part); n != len(part) || err != nil {
			t.Fatalf("Write(%q) exp: %d, nil got: %d, %v", part, len(part), n, err)
		}
	}
	w.Flush()
	if got, want := out.String(), `卷ok\u009b2J é\xe5\x8d`; got != want {
		t.Fatalf("output exp: %q got: %q", want, got)
	}
}

// -json output stays JSON with the same values; the characters encoding/
// json writes raw (DEL, C1 controls, bidi overrides) become \u escapes, so
// the terminal never receives them and the safeWriter has nothing to do.
func TestPrintJSON_NoRawControlsSameValue(t *testing.T) {
	in := map[string]string{"name": hostile + "\x7f", "plain": "卷 <redacted>"}
	var raw bytes.Buffer
	if err := printJSON(newSafeWriter(&raw), in); err != nil {
		t.Fatal(err)
	}
	if bad := rawTerminalBytes(raw.String()); bad != "" || strings.Contains(raw.String(), "\x7f") {
		t.Fatalf("-json exp: no raw control got: %s in %s", bad, raw.String())
	}
	var back map[string]string
	if err := json.Unmarshal(raw.Bytes(), &back); err != nil {
		t.Fatalf("-json exp: valid JSON got: %v\n%q", err, raw.String())
	}
	if back["name"] != in["name"] || back["plain"] != in["plain"] {
		t.Fatalf("-json exp: the same values got: %q", back)
	}
}
