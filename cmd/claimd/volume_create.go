package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/volspec"
)

// readCreateSpec reads one volume create spec, JSON or HCL (package
// volspec): an unknown key or a bad size is an error that names it.
func readCreateSpec(path string) (*structs.VolumeCreateSpec, error) {
	data, err := readSpecFile(path)
	if err != nil {
		return nil, err
	}
	return volspec.ReadCreate(specName(path), data)
}

func runVolumeCreate(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume create", stdout, stderr)
	var spec *structs.VolumeCreateSpec
	check := func(pos []string) (err error) {
		if len(pos) != 1 {
			return errors.New("usage: claimd volume create [flags] FILE (a volume create spec in HCL or JSON, or - for stdin; `claimd volume init -type create` writes an example)")
		}
		if spec, err = readCreateSpec(pos[0]); err != nil {
			return err
		}
		if err := spec.Validate(); err != nil {
			return fmt.Errorf("create: %v", err)
		}
		return nil
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, _ []string) int {
		out, err := c.CreateVolume(ctx, spec)
		if err != nil {
			return x.fail("create: %v", err)
		}
		if out.Expanded != nil {
			return reportExpansions(stdout, stderr, out.Expanded)
		}
		fmt.Fprintf(stdout, "Volume %q created: external ID %q, capacity %d bytes (index %d)\n",
			out.Volume.ID, out.Volume.ExternalID, out.Volume.Capacity, out.Index)
		return 0
	})
}

func runVolumeDelete(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume delete", stdout, stderr)
	return x.run(args, exactly(1, "usage: claimd volume delete [flags] ID"), func(ctx context.Context, c *api.Client, pos []string) int {
		_, err := c.DeleteVolume(ctx, pos[0])
		return x.done(err, "delete", "Volume %q deleted\n", pos[0])
	})
}
