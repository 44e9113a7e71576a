package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/claimd/claimd/volspec"
)

// runVolumeInit writes a commented example volume spec (package volspec)
// to a new file, volume.hcl (volume.json with -json) unless named; "-" is
// standard output. An existing file is never overwritten.
func runVolumeInit(args []string, stdout, stderr io.Writer) int {
	fset := newFlagSet("volume init", stderr)
	typ := fset.String("type", "register", "register (a volume the storage has) or create (one its plugin makes)")
	asJSON := fset.Bool("json", false, "write JSON (without comments) instead of HCL")
	if err := fset.Parse(args); err != nil {
		return 1
	}
	if fset.NArg() > 1 {
		fmt.Fprintln(stderr, "usage: claimd volume init [-type register|create] [-json] [FILE]")
		return 1
	}
	text, err := volspec.Example(*typ, *asJSON)
	if err != nil {
		return fail(stderr, "%v", err)
	}
	path := "volume.hcl"
	if *asJSON {
		path = "volume.json"
	}
	if fset.NArg() == 1 {
		path = fset.Arg(0)
	}
	if path == "-" {
		fmt.Fprint(stdout, text)
		return 0
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fail(stderr, "%s exists; not overwriting it (name another file, or - for standard output)", path)
	}
	if err == nil {
		_, err = io.WriteString(f, text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fail(stderr, "%v", err)
	}
	verb := "register"
	if *typ == "create" {
		verb = "create"
	}
	fmt.Fprintf(stdout, "Example volume spec written to %s; edit it, then: claimd volume %s %s\n", path, verb, path)
	return 0
}
