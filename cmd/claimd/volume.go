package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/volspec"
)

// readVolumeSpec reads a register spec, HCL or JSON (package volspec): one
// volume, or a JSON array of volumes. An unknown key is an error that
// names it, not a silent no-op.
func readVolumeSpec(path string) ([]*structs.Volume, error) {
	data, err := readSpecFile(path)
	if err != nil {
		return nil, err
	}
	return volspec.ReadRegister(specName(path), data)
}

// specName is the name a spec's errors give: the file, or "stdin".
func specName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// readSpecFile reads a spec file, or standard input for "-", without
// surrounding white space.
func readSpecFile(path string) ([]byte, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	return bytes.TrimSpace(data), err
}

func runVolumeRegister(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume register", stdout, stderr)
	var vols []*structs.Volume
	check := func(pos []string) (err error) {
		if len(pos) != 1 {
			return errors.New("usage: claimd volume register [flags] FILE (a volume spec in HCL or JSON, or - for stdin; `claimd volume init` writes an example)")
		}
		vols, err = readVolumeSpec(pos[0])
		return err
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, _ []string) int {
		out, err := c.RegisterVolumes(ctx, vols...)
		if err != nil {
			return x.fail("register: %v", err)
		}
		for _, v := range vols {
			fmt.Fprintf(stdout, "Volume %q registered (index %d)\n", v.ID, out.RegisterIndex)
		}
		// A larger capacity than recorded grew the volume: said as `volume
		// expand` says it, exit 2 with nodes pending.
		return reportExpansions(stdout, stderr, out.Expanded...)
	})
}

func runVolumeDeregister(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume deregister", stdout, stderr)
	force := x.fs.Bool("force", false, "deregister even with claims, when every claiming allocation is terminal")
	return x.run(args, exactly(1, "usage: claimd volume deregister [-force] ID"), func(ctx context.Context, c *api.Client, pos []string) int {
		if *force {
			showStorageBeforeForce(ctx, c, stderr, pos[0])
		}
		_, err := c.DeregisterVolumes(ctx, *force, pos[0])
		return x.done(err, "deregister", "Volume %q deregistered\n", pos[0])
	})
}

func runVolumeStatus(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume status", stdout, stderr).jsonFlag("print JSON")
	stale := x.fs.Bool("stale", false, "answer from the contacted server's state")
	return x.run(args, atMost(1, "usage: claimd volume status [-json] [ID]"), func(ctx context.Context, c *api.Client, pos []string) int {
		q := structs.QueryOptions{AllowStale: *stale}
		return showOneOrAll(x, "volume status", pos, func(id string) (*structs.Volume, error) {
			vol, _, err := c.Volume(ctx, id, q)
			return vol, err
		}, func() ([]*structs.Volume, error) {
			vols, _, err := c.Volumes(ctx, "", q)
			return vols, err
		}, "No volumes", func(w io.Writer, vol *structs.Volume) {
			printVolume(w, vol, releaseRetry(ctx, c, vol))
			usageSection(ctx, c, w, vol)
			storageSection(ctx, c, w, vol)
		}, printVolumes)
	})
}

// releaseRetry is the leader's retry state of a volume's release, when it
// has past claims and the leader has one (best effort: nil otherwise).
func releaseRetry(ctx context.Context, c *api.Client, vol *structs.Volume) *structs.ReleaseStatus {
	if len(vol.PastClaims) == 0 {
		return nil
	}
	st, err := c.ReleaseStatus(ctx)
	if err != nil {
		return nil
	}
	if r, ok := st[vol.ID]; ok {
		return &r
	}
	return nil
}

// printVolumes is `volume status`'s table.
func printVolumes(w io.Writer, vols []*structs.Volume) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tPlugin\tAccess Mode\tAttachment Mode")
	for _, v := range vols {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.ID, orDash(v.Name), v.PluginID, v.AccessMode, v.AttachmentMode)
	}
	tw.Flush()
}

func printVolume(w io.Writer, v *structs.Volume, retry *structs.ReleaseStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\t= %s\n", v.ID)
	fmt.Fprintf(tw, "Name\t= %s\n", orDash(v.Name))
	fmt.Fprintf(tw, "External ID\t= %s\n", v.ExternalID)
	fmt.Fprintf(tw, "Plugin ID\t= %s\n", v.PluginID)
	fmt.Fprintf(tw, "Access Mode\t= %s\n", v.AccessMode)
	fmt.Fprintf(tw, "Attachment Mode\t= %s\n", v.AttachmentMode)
	if v.MountOptions != nil {
		fmt.Fprintf(tw, "Mount Options\t= fs_type=%s flags=%s\n", orDash(v.MountOptions.FSType), strings.Join(v.MountOptions.MountFlags, ","))
	}
	fmt.Fprintf(tw, "Capacity\t= %s\n", capacityText(v.Capacity))
	fmt.Fprintf(tw, "Topology\t= %s\n", orDash(v.TopologyText()))
	fmt.Fprintf(tw, "Node Lost\t= %s\n", v.NodeLost.OrWait())
	if v.RefuseClaimsWhenAbnormal {
		fmt.Fprintf(tw, "When Abnormal\t= refuse new claims\n")
	}
	fmt.Fprintf(tw, "Parameters\t= %s\n", formatMap(v.Parameters))
	if len(v.MutableParameters) > 0 {
		fmt.Fprintf(tw, "Mutable Parameters\t= %s\n", formatMap(v.MutableParameters))
	}
	fmt.Fprintf(tw, "Secrets\t= %s\n", formatSecretKeys(v.Secrets))
	fmt.Fprintf(tw, "Create Index\t= %d\n", v.CreateIndex)
	fmt.Fprintf(tw, "Current Modes\t= %s %s\n", orDash(string(v.CurrentAccessMode)), string(v.CurrentAttachmentMode))
	fmt.Fprintf(tw, "Modify Index\t= %d\n", v.ModifyIndex)
	if v.Health() != structs.VolumeHealthy {
		fmt.Fprintf(tw, "Health\t= %s (a node reported that its fence of this volume failed)\n", v.Health())
	}
	tw.Flush()
	printFenceFailures(w, v)
	printClaims(w, v, retry)
	printTimelines(w, v)
}

// printTimelines shows each release's steps, for the claims being released
// and the last freed ones: where a release stopped, and since when.
func printTimelines(w io.Writer, v *structs.Volume) {
	claims := make([]*structs.Claim, 0, len(v.PastClaims)+len(v.Released))
	for _, id := range structs.SortedKeys(v.PastClaims) {
		claims = append(claims, v.PastClaims[id])
	}
	claims = append(claims, v.Released...)
	if len(claims) == 0 && len(v.Repairs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Release Timelines")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Alloc\tNode\tStep\tIndex\tTime\tPath")
	for _, c := range claims {
		path := orDash(string(c.ReleasePath()))
		for _, st := range c.Steps {
			at := "-"
			if !st.Time.IsZero() {
				at = st.Time.UTC().Format(time.RFC3339)
			}
			if c.Fenced && st.State == structs.ClaimStateNodeDetached {
				// The lease ran out before the fenced checkpoint: show
				// that moment as its own step, in time order.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.AllocID, c.NodeID, "lease-ran-out", "-",
					c.LeaseExpiredAt.UTC().Format(time.RFC3339), path)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", c.AllocID, c.NodeID, st.State, st.Index, at, path)
		}
	}
	// Attachments no claim explained, which reconciliation detached: the
	// orphan's two moments, found and detached.
	for _, r := range v.Repairs {
		node := r.NodeID
		if node == "" {
			node = r.ExternalNodeID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", "-", node, "orphan-found", "-", r.FirstSeen.UTC().Format(time.RFC3339), "reconcile")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", "-", node, "orphan-detached", "-", r.At.UTC().Format(time.RFC3339), "reconcile")
	}
	tw.Flush()
}

// capacityText: 0 means the plugin never said (a registered volume).
func capacityText(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d bytes", n)
}

func formatMap(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for _, k := range structs.SortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, " ")
}

// formatSecretKeys shows which secrets exist, never their values.
func formatSecretKeys(s structs.Secrets) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(structs.SortedKeys(s), ",") + " (values hidden)"
}

// printFenceFailures warns of every fence of the volume a node reported
// failed (issue 39): the volume may still be written there, whatever its
// claims say.
func printFenceFailures(w io.Writer, v *structs.Volume) {
	if len(v.FenceFailures) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, f := range v.FenceFailures {
		fmt.Fprintf(w, "WARNING: volume %s %s (fence started %s, reported at index %d)\n",
			v.ID, f.Warning(), f.FencedAt.UTC().Format(time.RFC3339), f.ReportIndex)
	}
	fmt.Fprintln(w, "  The node's writer must be stopped there by hand, or the node report its fence done; `claimd node deregister` of a node that is gone for good clears it.")
}
