package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/volspec"
)

func runSnapshotCreate(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume snapshot create", stdout, stderr).jsonFlag("print the snapshot as JSON")
	return x.run(args, exactly(2, "usage: claimd volume snapshot create [flags] VOLUME NAME"), func(ctx context.Context, c *api.Client, pos []string) int {
		snap, err := c.CreateSnapshot(ctx, pos[0], pos[1], nil)
		return showOne(x, "snapshot create", snap, err, func(w io.Writer, snap *structs.Snapshot) {
			fmt.Fprintf(w, "Snapshot %q of volume %q created: ID %q, %d bytes, ready %t (plugin %q)\n",
				pos[1], pos[0], snap.ID, snap.SizeBytes, snap.ReadyToUse, snap.PluginID)
		})
	})
}

func runSnapshotList(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume snapshot list", stdout, stderr).jsonFlag("print JSON")
	plugin := x.fs.String("plugin", "", "only this plugin's snapshots (default: every plugin that lists snapshots)")
	return x.run(args, exactly(0, "usage: claimd volume snapshot list [flags] [-plugin ID]"), func(ctx context.Context, c *api.Client, _ []string) int {
		out, err := c.Snapshots(ctx, *plugin)
		if err != nil {
			return x.fail("snapshot list: %v", err)
		}
		if x.asJSON {
			return x.json(out)
		}
		printSnapshots(stdout, out.Snapshots)
		for _, p := range structs.SortedKeys(out.Unreachable) {
			fmt.Fprintf(stderr, "Warning: plugin %q could not list its snapshots: %s\n", p, out.Unreachable[p])
		}
		if len(out.Unreachable) > 0 {
			return 1
		}
		return 0
	})
}

func printSnapshots(w io.Writer, snaps []*structs.Snapshot) {
	if len(snaps) == 0 {
		fmt.Fprintln(w, "No snapshots")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Plugin\tSnapshot ID\tVolume\tExternal Volume ID\tSize\tReady\tCreated")
	for _, s := range snaps {
		created := "-"
		if !s.CreateTime.IsZero() {
			created = s.CreateTime.Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%t\t%s\n", s.PluginID, s.ID, orDash(s.SourceVolumeID),
			s.SourceExternalID, s.SizeBytes, s.ReadyToUse, created)
	}
	tw.Flush()
}

func runSnapshotDelete(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume snapshot delete", stdout, stderr)
	return x.run(args, exactly(2, "usage: claimd volume snapshot delete [flags] PLUGIN SNAPSHOT_ID"), func(ctx context.Context, c *api.Client, pos []string) int {
		return x.done(c.DeleteSnapshot(ctx, pos[0], pos[1]), "snapshot delete", "Snapshot %q of plugin %q deleted\n", pos[1], pos[0])
	})
}

// runVolumeExpand exits 0 only when every node finished: with nodes
// pending the capacity is grown and recorded, the command says which
// nodes still must expand, and exits 2 so scripts notice
// (reportExpansions).
func runVolumeExpand(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume expand", stdout, stderr)
	capText := x.fs.String("capacity", "", "the size to grow to: bytes, or with a unit (2GiB, 500MB)")
	var capacity int64
	check := func(pos []string) (err error) {
		if len(pos) != 1 || *capText == "" {
			return errors.New("usage: claimd volume expand [flags] VOLUME -capacity SIZE")
		}
		if capacity, err = volspec.ParseSize(*capText); err != nil {
			return fmt.Errorf("capacity: %v", err)
		}
		return nil
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, pos []string) int {
		out, err := c.ExpandVolume(ctx, pos[0], capacity)
		if err != nil {
			return x.fail("expand: %v", err)
		}
		return reportExpansions(stdout, stderr, &out.VolumeExpansion)
	})
}

// reportExpansions prints what growing volumes did (`volume expand`, or a
// register or create that grew them) and returns the exit code: 2 when a
// node still must expand, with the command that finishes it, else 0.
func reportExpansions(stdout, stderr io.Writer, grown ...*structs.VolumeExpansion) int {
	code := 0
	for _, x := range grown {
		fmt.Fprintf(stdout, "Volume %q expanded to %d bytes (index %d); nodes expanded: %s\n",
			x.VolumeID, x.Capacity, x.CapacityIndex, orDash(strings.Join(x.NodesExpanded, ", ")))
		for _, n := range structs.SortedKeys(x.NodesPending) {
			fmt.Fprintf(stdout, "Node %s: expansion pending: %s\n", n, x.NodesPending[n])
		}
		if len(x.NodesPending) > 0 {
			fmt.Fprintf(stderr, "Error: expansion of volume %q pending on %d node(s); run `claimd volume expand %s -capacity %d` once they are back\n",
				x.VolumeID, len(x.NodesPending), x.VolumeID, x.Capacity)
			code = 2
		}
	}
	return code
}

// runVolumeModify is `claimd volume modify -param K=V [-param ...] VOLUME`:
// ControllerModifyVolume with the volume's mutable parameters, recorded on
// the volume once the plugin did it.
func runVolumeModify(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume modify", stdout, stderr)
	params := map[string]string{}
	x.fs.Func("param", "a mutable parameter to set, KEY=VALUE (repeat for more)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		params[k] = v
		return nil
	})
	check := func(pos []string) error {
		if len(pos) != 1 || len(params) == 0 {
			return errors.New("usage: claimd volume modify -param KEY=VALUE [-param ...] VOLUME")
		}
		return nil
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, pos []string) int {
		out, err := c.ModifyVolume(ctx, pos[0], params)
		if err != nil {
			return x.fail("modify: %v", err)
		}
		fmt.Fprintf(stdout, "Volume %q modified (index %d); mutable parameters now: %s\n", pos[0], out.Index, formatMap(out.Volume.MutableParameters))
		return 0
	})
}
