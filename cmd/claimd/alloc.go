package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
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
	x := newServerCmd("alloc run", stdout, stderr)
	node := x.fs.String("node", "", "node ID to place the allocation on (required)")
	id := x.fs.String("id", "", "allocation ID (default: a new UUID)")
	wait := x.fs.Bool("wait", false, "wait until the allocation runs (its volumes mounted) or fails, showing its progress")
	waitTimeout := x.fs.Duration("wait-timeout", 5*time.Minute, "with -wait: give up waiting after this long (the allocation stays placed)")
	var vols volumeFlags
	x.fs.Var(&vols, "volume", "volume to claim, VOL or VOL:ro (repeatable)")
	return x.run(args, noArguments, func(ctx context.Context, c *api.Client, _ []string) int {
		if *id == "" {
			*id = newID()
		}
		var err error
		if *node, err = resolveNode(ctx, c, *node); err != nil {
			return x.fail("alloc run: -node: %v", err)
		}
		_, err = c.PlaceAllocs(ctx, &structs.Alloc{ID: *id, NodeID: *node, Volumes: vols})
		if code := x.done(err, "alloc run", "Allocation %q placed on node %q\n", *id, *node); code != 0 || !*wait {
			return code
		}
		return waitRunning(x, c, *id, *waitTimeout)
	})
}

// waitRunning follows an allocation with blocking queries until it runs
// (the client agent reports running once every volume is mounted), fails
// or is lost, printing each change of its status: `alloc run -wait`, so
// that a script writes into the mount only once it exists.
func waitRunning(x *cmd, c *api.Client, id string, limit time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var index uint64
	last := ""
	for {
		a, meta, err := c.Alloc(ctx, id, structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: 30 * time.Second})
		switch {
		case ctx.Err() != nil:
			return x.fail("alloc run: allocation %q did not run within %s (last: %s); it stays placed", id, limit, orDash(last))
		case err != nil:
			return x.fail("alloc run: waiting for %q: %v", id, err)
		case a == nil:
			return x.fail("alloc run: allocation %q is gone", id)
		}
		index = meta.Index
		now := string(a.ClientStatus)
		if a.ClientDescription != "" {
			now += ": " + a.ClientDescription
		}
		if now != last {
			fmt.Fprintf(x.stdout, "  %s  %s\n", time.Now().Format("15:04:05.000"), now)
			last = now
		}
		switch a.ClientStatus {
		case structs.AllocClientRunning:
			fmt.Fprintf(x.stdout, "Allocation %q is running\n", id)
			return 0
		case structs.AllocClientFailed, structs.AllocClientLost, structs.AllocClientComplete:
			return x.fail("alloc run: allocation %q is %s: %s", id, a.ClientStatus, orDash(a.ClientDescription))
		}
		if a.DesiredStatus == structs.AllocDesiredStop {
			return x.fail("alloc run: allocation %q was stopped before it ran", id)
		}
	}
}

func runAllocStop(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("alloc stop", stdout, stderr).allocAt(-1)
	wait := x.fs.Bool("wait", false, "wait until the servers have freed every claim of the allocations (node detach, then controller detach)")
	waitTimeout := x.fs.Duration("wait-timeout", 5*time.Minute, "with -wait: give up waiting after this long (the release goes on)")
	return x.run(args, atLeast(1, "usage: claimd alloc stop [-wait] ID [ID...]"), func(ctx context.Context, c *api.Client, ids []string) int {
		if _, err := c.StopAllocs(ctx, ids...); err != nil {
			return x.fail("alloc stop: %v", err)
		}
		for _, id := range ids {
			fmt.Fprintf(stdout, "Allocation %q stopping\n", id)
		}
		if !*wait {
			return 0
		}
		return waitFreed(x, c, ids, *waitTimeout)
	})
}

// waitFreed follows the volumes of stopped allocations with blocking
// queries until none holds a claim of them, live or being released:
// `alloc stop -wait`, so that a script's next step (delete the volume,
// claim it elsewhere) does not race the release.
func waitFreed(x *cmd, c *api.Client, ids []string, limit time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for _, id := range ids {
		a, _, err := c.Alloc(ctx, id, structs.QueryOptions{})
		if err != nil || a == nil {
			continue // gone: nothing of it is held
		}
		for _, vr := range a.Volumes {
			var index uint64
			last := ""
			for {
				v, meta, err := c.Volume(ctx, vr.VolumeID, structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: 30 * time.Second})
				if ctx.Err() != nil {
					return x.fail("alloc stop: the claim of %q on volume %q was not freed within %s (last: %s); the release goes on", id, vr.VolumeID, limit, orDash(last))
				}
				if err != nil {
					return x.fail("alloc stop: waiting for volume %q: %v", vr.VolumeID, err)
				}
				var held *structs.Claim
				if v != nil {
					for _, cl := range v.AllClaims() {
						if cl.AllocID == id {
							held = cl
						}
					}
				}
				if held == nil {
					fmt.Fprintf(x.stdout, "Claim of %q on volume %q freed\n", id, vr.VolumeID)
					break
				}
				if now := string(held.State); now != last {
					fmt.Fprintf(x.stdout, "  %s  %s on %s: %s\n", time.Now().Format("15:04:05.000"), id, vr.VolumeID, now)
					last = now
				}
				index = meta.Index
			}
		}
	}
	return 0
}

func runAllocStatus(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("alloc status", stdout, stderr).jsonFlag("print JSON").allocAt(0)
	node := x.fs.String("node", "", "only this node's allocations")
	return x.run(args, atMost(1, "usage: claimd alloc status [-json] [-node NODE] [ID]"), func(ctx context.Context, c *api.Client, pos []string) int {
		return showOneOrAll(x, "alloc status", pos, func(id string) (*structs.Alloc, error) {
			a, _, err := c.Alloc(ctx, id, structs.QueryOptions{})
			return a, err
		}, func() ([]*structs.Alloc, error) {
			id, err := resolveNode(ctx, c, *node)
			if err != nil {
				return nil, err
			}
			allocs, _, err := c.Allocs(ctx, id, structs.QueryOptions{})
			return allocs, err
		}, "No allocations", func(w io.Writer, a *structs.Alloc) { printAllocs(w, []*structs.Alloc{a}) }, printAllocs)
	})
}

// printAllocs is `alloc status`'s table.
func printAllocs(w io.Writer, allocs []*structs.Alloc) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
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
}
