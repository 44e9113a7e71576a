package main

import (
	"fmt"
	"io"

	"github.com/claimd/claimd/structs"
)

// readCreateSpec decodes one volume create spec strictly: an unknown field
// is an error that names it.
func readCreateSpec(path string) (*structs.VolumeCreateSpec, error) {
	data, err := readSpecFile(path)
	if err != nil {
		return nil, err
	}
	var spec structs.VolumeCreateSpec
	if err := strictJSON(data).Decode(&spec); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &spec, nil
}

func runVolumeCreate(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("volume create", stderr)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd volume create [flags] FILE (a JSON volume create spec, or - for stdin)")
	}
	spec, err := readCreateSpec(fs.Arg(0))
	if err != nil {
		return fail(stderr, "%v", err)
	}
	if err := spec.Validate(); err != nil {
		return fail(stderr, "create: %v", err)
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	out, err := c.Create(ctx, spec)
	if err != nil {
		return fail(stderr, "create: %v", err)
	}
	if out.Expanded != nil {
		return reportExpansions(stdout, stderr, out.Expanded)
	}
	fmt.Fprintf(stdout, "Volume %q created: external ID %q, capacity %d bytes (index %d)\n",
		out.Volume.ID, out.Volume.ExternalID, out.Volume.Capacity, out.Index)
	return 0
}

func runVolumeDelete(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("volume delete", stderr)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd volume delete [flags] ID")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	if _, err := c.DeleteVolume(ctx, fs.Arg(0)); err != nil {
		return fail(stderr, "delete: %v", err)
	}
	fmt.Fprintf(stdout, "Volume %q deleted\n", fs.Arg(0))
	return 0
}
