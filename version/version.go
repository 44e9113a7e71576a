// Package version says which claimd this binary is. A release build stamps
// the version and commit with the linker (scripts/release.sh):
//
//	go build -ldflags "-X github.com/claimd/claimd/version.version=v0.9.0 \
//	    -X github.com/claimd/claimd/version.commit=<full hash>"
//
// A plain `go build` or `go run` in a checkout gets the commit (and whether
// the tree had changes) from the Go toolchain's build information, and the
// version "dev".
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Set by the linker in release builds; empty otherwise.
var (
	version string
	commit  string
)

// Info describes this binary.
type Info struct {
	// Version is the release version ("v0.9.0"), or "dev" for a build
	// that was not stamped.
	Version string `json:"version"`
	// Commit is the git commit it was built from (12 hex digits), with
	// "+dirty" when the checkout had uncommitted changes; empty when
	// unknown.
	Commit string `json:"commit,omitempty"`
	// GoVersion is the Go toolchain that built it.
	GoVersion string `json:"go_version"`
}

// Get returns this binary's Info. Servers answer it on every health
// check: the build information is read once.
func Get() Info { return get() }

var get = sync.OnceValue(compute)

func compute() Info {
	info := Info{Version: version, Commit: shortCommit(commit), GoVersion: runtime.Version()}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = vcsCommit()
	}
	return info
}

// String is the one-line form agents and snapshots record:
// "v0.9.0 (3f2a9c1b7d4e)", "dev (3f2a9c1b7d4e+dirty)" or "dev".
func (i Info) String() string {
	if i.Commit == "" {
		return i.Version
	}
	return i.Version + " (" + i.Commit + ")"
}

// Short is Get().String().
func Short() string { return Get().String() }

func shortCommit(c string) string {
	c = strings.TrimSpace(c)
	if len(c) > 12 {
		c = c[:12]
	}
	return c
}

// vcsCommit reads the commit the Go toolchain recorded for a build in a
// git checkout.
func vcsCommit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return shortCommit(rev) + dirty
}
