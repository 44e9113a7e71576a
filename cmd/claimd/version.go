package main

import (
	"fmt"
	"io"

	"github.com/claimd/claimd/version"
)

// runVersion prints what this binary is: the version a release stamped
// ("dev" otherwise), the git commit and the Go toolchain (package version).
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: claimd version [-json]")
		return 1
	}
	v := version.Get()
	if *asJSON {
		return jsonOut(stdout, stderr, v)
	}
	fmt.Fprintf(stdout, "claimd %s\n", v.Version)
	if v.Commit != "" {
		fmt.Fprintf(stdout, "Commit: %s\n", v.Commit)
	}
	fmt.Fprintf(stdout, "Go:     %s\n", v.GoVersion)
	return 0
}
