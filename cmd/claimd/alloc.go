package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/claimd/claimd/structs"
)

// volumeFlags collects repeated -volume VOL[:ro] flags.
type volumeFlags []*structs.AllocVolumeRequest

func (v *volumeFlags) String() string { return fmt.Sprint(len(*v), " volumes") }

func (v *volumeFlags) Set(s string) error {
	id, mode, _ := strings.Cut(s, ":")
	switch mode {
	case "", "rw":
		*v = append(*v, &structs.AllocVolumeRequest{VolumeID: id})
	case "ro":
		*v = append(*v, &structs.AllocVolumeRequest{VolumeID: id, ReadOnly: true})
	default:
		return fmt.Errorf("%q: mode after ':' must be ro or rw", s)
	}
	return nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func runAllocRun(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("alloc run", stderr)
	cf.register(fs)
	node := fs.String("node", "", "node ID to place the allocation on (required)")
	id := fs.String("id", "", "allocation ID (default: a new UUID)")
	var vols volumeFlags
	fs.Var(&vols, "volume", "volume to claim, VOL or VOL:ro (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if *id == "" {
		*id = newID()
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	alloc := &structs.Alloc{ID: *id, NodeID: *node, Volumes: vols}
	if _, err := c.PlaceAllocs(ctx, alloc); err != nil {
		return fail(stderr, "alloc run: %v", err)
	}
	fmt.Fprintf(stdout, "Allocation %q placed on node %q\n", *id, *node)
	return 0
}

func runAllocStop(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("alloc stop", stderr)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() == 0 {
		return fail(stderr, "usage: claimd alloc stop ID [ID...]")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	if _, err := c.StopAllocs(ctx, fs.Args()...); err != nil {
		return fail(stderr, "alloc stop: %v", err)
	}
	for _, id := range fs.Args() {
		fmt.Fprintf(stdout, "Allocation %q stopping\n", id)
	}
	return 0
}

func runAllocStatus(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("alloc status", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	node := fs.String("node", "", "only this node's allocations")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	var allocs []*structs.Alloc
	if fs.NArg() == 1 {
		a, _, err := c.Alloc(ctx, fs.Arg(0), structs.QueryOptions{})
		if err != nil {
			return fail(stderr, "alloc status: %v", err)
		}
		if *asJSON {
			return jsonOut(stdout, stderr, a)
		}
		allocs = []*structs.Alloc{a}
	} else {
		allocs, _, err = c.Allocs(ctx, *node, structs.QueryOptions{})
		if err != nil {
			return fail(stderr, "alloc status: %v", err)
		}
		if *asJSON {
			if allocs == nil {
				allocs = []*structs.Alloc{}
			}
			return jsonOut(stdout, stderr, allocs)
		}
	}
	if len(allocs) == 0 {
		fmt.Fprintln(stdout, "No allocations")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNode\tDesired\tClient Status\tVolumes\tDescription")
	for _, a := range allocs {
		var vs []string
		for _, v := range a.Volumes {
			s := v.VolumeID
			if v.ReadOnly {
				s += ":ro"
			}
			vs = append(vs, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.NodeID, a.DesiredStatus, a.ClientStatus,
			orDash(strings.Join(vs, ",")), orDash(a.ClientDescription))
	}
	tw.Flush()
	return 0
}

func jsonOut(stdout, stderr io.Writer, v any) int {
	if err := printJSON(stdout, v); err != nil {
		return fail(stderr, "%v", err)
	}
	return 0
}
