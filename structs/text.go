package structs

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text that nodes, plugins and operators hand the servers ends up on an
// operator's terminal (`node status`, `plugin status`, ...) and, for
// identifiers, in calls to CSI plugins. A terminal obeys escape sequences
// in what it prints: a node name carrying ESC ] 0 ; ... BEL sets the
// window title, ESC [ 2 J clears the screen, ESC [ 31 m fakes a red line.
// So (issue 38):
//
//   - identifiers and names (a node's name, a volume's external ID, a node
//     plugin's external node ID, topology segments) must be printable text:
//     one that is not is refused, naming the field and the problem;
//   - free text a node reports (plugin health descriptions, fence errors,
//     an allocation's client description) is made printable and bounded
//     where it enters (SanitizeText): refusing it would refuse the node's
//     registration or status report over a plugin's error message;
//   - the CLI renders whatever is left visibly (EscapeText), for data
//     stored before these rules.
//
// These rules run where a request enters the leader (the endpoints), not
// in the state machine: a log entry written before them must apply the same
// way when a newer server replays it.

// Bounds of the text rules.
const (
	// MaxNameLen bounds a node's name: a host name is at most 253 bytes.
	MaxNameLen = 256
	// MaxExternalIDLen bounds a storage ID a plugin is given (a volume's
	// external ID, a node plugin's node ID). CSI caps a node_id at 256
	// bytes and other strings at 128; the longest IDs real drivers use,
	// Azure disk resource IDs (/subscriptions/<uuid>/resourceGroups/<rg>/
	// providers/Microsoft.Compute/disks/<name>), stay under 256 but for
	// the longest allowed names.
	MaxExternalIDLen = 256
	// MaxFreeTextLen bounds one free-text field a node reports, after
	// sanitising: a paragraph of a plugin's error message.
	MaxFreeTextLen = 1024
)

// truncatedMark ends free text that SanitizeText cut short.
const truncatedMark = "…"

// UnsafeRune reports a character a terminal may act on rather than show,
// or that makes the text read differently from what it holds: C0 controls
// (newline and tab too), DEL, C1 controls (U+009B is CSI on terminals that
// take 8-bit controls), and the bidirectional overrides, embeddings,
// isolates and marks that reorder what follows them ("Trojan Source"), and
// the Unicode line and paragraph separators.
func UnsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// firstUnsafe is the byte offset and a description of the first character
// of s that may not be in a printable identifier, or -1.
func firstUnsafe(s string) (int, string) {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i, fmt.Sprintf("byte %#02x is not UTF-8", s[i])
			}
		}
		if UnsafeRune(r) {
			return i, fmt.Sprintf("control character %s", escapeRune(nil, r))
		}
	}
	return -1, ""
}

// ValidateName checks a name shown to operators: printable UTF-8 without
// control characters, at most max bytes. Empty is allowed (the caller says
// when a name is required).
func ValidateName(field, s string, max int) error {
	if len(s) > max {
		return Invalid(field, fmt.Sprintf("is %d bytes, at most %d allowed", len(s), max))
	}
	if at, what := firstUnsafe(s); at >= 0 {
		return Invalid(field, fmt.Sprintf("%s at byte %d: only printable text is allowed", what, at))
	}
	return nil
}

// ValidateExternalID checks a storage ID claimd passes to a CSI plugin
// (volume_id, node_id): 1 to MaxExternalIDLen bytes of printable UTF-8,
// and no ".." path element. A plugin that builds a path from the ID (as
// hostdir does) would otherwise be steered outside its root by "../".
// A leading "/" is allowed: Azure's disk driver's volume IDs are resource
// paths that start with one, and joining a root with an absolute path
// stays under the root.
func ValidateExternalID(field, id string) error {
	if id == "" {
		return Invalid(field, "must not be empty")
	}
	return validateStorageIDText(field, id, MaxExternalIDLen)
}

// validateStorageIDText is ValidateExternalID's rule with another bound
// (snapshot IDs keep their own).
func validateStorageIDText(field, id string, max int) error {
	if err := ValidateName(field, id, max); err != nil {
		return err
	}
	for _, elem := range strings.FieldsFunc(id, func(r rune) bool { return r == '/' || r == '\\' }) {
		if elem == ".." {
			return Invalid(field, fmt.Sprintf("%s has a \"..\" path element: a plugin could resolve it outside its storage", EscapeText(id)))
		}
	}
	return nil
}

// EscapeText renders s printable: every character UnsafeRune names, and
// every byte that is not UTF-8, becomes its Go escape (\x1b, \n, \u202e),
// visible and inert. Everything else, backslashes included, is unchanged.
func EscapeText(s string) string {
	if at, _ := firstUnsafe(s); at < 0 {
		return s
	}
	return string(AppendEscaped(nil, []byte(s), false))
}

// AppendEscaped appends src to dst as EscapeText renders it. keepLayout
// leaves newlines and tabs alone: the CLI's own output is laid out with
// them, and what it prints is escaped as a whole.
func AppendEscaped(dst, src []byte, keepLayout bool) []byte {
	for len(src) > 0 {
		r, size := utf8.DecodeRune(src)
		switch {
		case r == utf8.RuneError && size <= 1:
			dst = fmt.Appendf(dst, `\x%02x`, src[0])
			size = 1
		case keepLayout && (r == '\n' || r == '\t'):
			dst = append(dst, byte(r))
		case UnsafeRune(r):
			dst = escapeRune(dst, r)
		default:
			dst = append(dst, src[:size]...)
		}
		src = src[size:]
	}
	return dst
}

// escapeRune appends r's Go escape.
func escapeRune(dst []byte, r rune) []byte {
	switch r {
	case '\n':
		return append(dst, `\n`...)
	case '\t':
		return append(dst, `\t`...)
	case '\r':
		return append(dst, `\r`...)
	}
	if r < 0x80 {
		return fmt.Appendf(dst, `\x%02x`, r)
	}
	return fmt.Appendf(dst, `\u%04x`, r)
}

// SanitizeText is free text from a node made fit to store and show:
// escaped (EscapeText) and cut to at most limit bytes on a character
// boundary, ending in "…" when cut.
func SanitizeText(s string, limit int) string {
	out := EscapeText(s)
	if len(out) <= limit {
		return out
	}
	cut := max(0, limit-len(truncatedMark))
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + truncatedMark
}
