package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet_StampedValuesWin(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
	got := compute()
	if got.Version != "v1.2.3" || got.Commit != "0123456789ab" || got.GoVersion != runtime.Version() {
		t.Fatalf("exp: stamped version, 12-digit commit, this Go got: %+v", got)
	}
	if s := got.String(); s != "v1.2.3 (0123456789ab)" {
		t.Fatalf("String: exp: %q got: %q", "v1.2.3 (0123456789ab)", s)
	}
}

func TestGet_UnstampedIsDev(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "", ""
	got := compute()
	if got.Version != "dev" {
		t.Fatalf("exp: dev got: %+v", got)
	}
	// A test binary has no VCS stamp, a checkout build does: either way
	// the string starts with the version and names no empty commit.
	if s := got.String(); !strings.HasPrefix(s, "dev") || strings.Contains(s, "()") {
		t.Fatalf("String: exp: dev with a commit or none got: %q", s)
	}
}
