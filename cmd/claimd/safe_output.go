package main

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/claimd/claimd/structs"
)

// What the CLI prints comes largely from the servers, and through them
// from client nodes and plugins: node names, plugin health descriptions,
// fence errors, claim errors, error messages. A terminal acts on escape
// sequences in what it is given (set the window title, clear the screen,
// colour a line), so every command's output passes through a safeWriter,
// which renders control characters and bidirectional overrides visibly
// (\x1b, \u202e: structs.EscapeText) and leaves newlines and tabs, the
// CLI's own layout, alone. Escaping the whole stream rather than each
// value at each Fprintf covers every command, those added later too, and
// error messages as well as tables. The servers sanitise node text where
// it enters (issue 38); this covers what was stored before and anything
// that reaches the CLI another way.

// rawOutputCommands are the verbs whose output is not escaped: the
// long-running agent and plugin, whose output is their log (hclog writes
// it, and a log line quotes values itself).
var rawOutputCommands = map[string]bool{"agent": true, "csi-plugin": true}

// runEscaped runs c with its output escaped, unless its verb is one of
// rawOutputCommands.
func runEscaped(c *command, verb string, args []string, stdout, stderr io.Writer) int {
	if rawOutputCommands[verb] {
		return c.run(args, stdout, stderr)
	}
	out, errw := newSafeWriter(stdout), newSafeWriter(stderr)
	code := c.run(args, out, errw)
	out.Flush()
	errw.Flush()
	return code
}

// safeWriter escapes what is written to it (structs.AppendEscaped) and
// passes it on. A UTF-8 character split across two writes is held back
// until its end arrives (or Flush), so that it is neither escaped as bad
// bytes nor let through unchecked.
type safeWriter struct {
	w io.Writer

	// mu: a command may print from more than one goroutine (a file's
	// writes were each whole before).
	mu      sync.Mutex
	pending []byte
	buf     []byte
}

func newSafeWriter(w io.Writer) *safeWriter { return &safeWriter{w: w} }

// Write escapes p; it reports len(p) written when the escaped bytes were
// all written.
func (s *safeWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := p
	if len(s.pending) > 0 {
		in = append(s.pending, p...)
		s.pending = nil
	}
	cut := len(in) - incompleteTail(in)
	s.buf = structs.AppendEscaped(s.buf[:0], in[:cut], true)
	if cut < len(in) {
		s.pending = append([]byte(nil), in[cut:]...)
	}
	if len(s.buf) == 0 {
		return len(p), nil
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a character left incomplete at the end (escaped as the
// bad bytes it is).
func (s *safeWriter) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	_, _ = s.w.Write(structs.AppendEscaped(nil, s.pending, true))
	s.pending = nil
}

// incompleteTail is how many bytes at the end of b begin a UTF-8
// character that is not complete yet (0 when none).
func incompleteTail(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return 0
			}
			return len(b) - i
		}
	}
	return 0
}

// jsonSafe rewrites encoding/json's output so that no character a
// terminal acts on stays raw: encoding/json escapes C0 controls and
// U+2028/U+2029 but writes DEL, C1 controls and bidirectional overrides
// as they are. They can only occur inside strings (JSON's own syntax is
// ASCII), where \uXXXX means the same character, so the JSON stays the
// same value and the safeWriter finds nothing to change in it.
func jsonSafe(b []byte) []byte {
	if !hasJSONRaw(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if jsonRaw(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return out
}

// jsonRaw: a character a terminal acts on that encoding/json leaves raw
// (it escapes everything below U+0020; its newlines are layout).
func jsonRaw(r rune) bool { return r >= 0x7f && structs.UnsafeRune(r) }

func hasJSONRaw(b []byte) bool {
	for _, r := range string(b) {
		if jsonRaw(r) {
			return true
		}
	}
	return false
}
