package structs

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// validID replaced a regexp on the claim path; it must accept exactly what
// the regexp did.
var idPatternSpec = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func TestValidID_AcceptsExactlyThePattern(t *testing.T) {
	for _, id := range []string{"", "a", "-a", ".a", "_a", "a-._b", "A9", "a b", "ä", "a/b", "a\x00",
		strings.Repeat("a", 128), strings.Repeat("a", 129)} {
		if got, want := validID(id), idPatternSpec.MatchString(id); got != want {
			t.Errorf("validID(%q) exp: %v got: %v", id, want, got)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.StringOfN(rapid.SampledFrom([]rune("aZ09._- /\x00é")), 0, 140, -1).Draw(t, "id")
		if got, want := validID(id), idPatternSpec.MatchString(id); got != want {
			t.Fatalf("validID(%q) exp: %v got: %v", id, want, got)
		}
	})
}
