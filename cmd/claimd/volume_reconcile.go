package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// runVolumeReconcile is `claimd volume reconcile [VOLUME]`: compare the
// storage with claimd's record now (issue 27) and show what disagrees.
// It exits 2 when an attachment disagrees (an orphan or a missing one),
// so scripts can act on it; volumes claimd does not know are listed only.
func runVolumeReconcile(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume reconcile", stdout, stderr).jsonFlag("print the reports as JSON")
	return x.run(args, atMost(1, "usage: claimd volume reconcile [-json] [VOLUME]"), func(ctx context.Context, c *api.Client, pos []string) int {
		vol := ""
		if len(pos) == 1 {
			vol = pos[0]
		}
		resp, err := c.ReconcileVolumes(ctx, vol)
		if err != nil {
			return x.fail("volume reconcile: %v", err)
		}
		if x.asJSON {
			if rc := x.json(resp.Reports); rc != 0 {
				return rc
			}
		} else {
			if len(resp.Reports) == 0 {
				fmt.Fprintln(stdout, "No plugin with a controller to reconcile")
			}
			for i, r := range resp.Reports {
				if i > 0 {
					fmt.Fprintln(stdout)
				}
				printStorageReport(stdout, r, vol)
			}
		}
		for _, r := range resp.Reports {
			for _, f := range r.Findings {
				if (vol == "" || f.VolumeID == vol) && (f.Kind == structs.FindingOrphan || f.Kind == structs.FindingMissing) {
					return 2
				}
			}
		}
		return 0
	})
}

// printStorageReport shows one plugin's round; only volumeID's findings
// when it is set.
func printStorageReport(w io.Writer, r *structs.StorageReport, volumeID string) {
	fmt.Fprintf(w, "Plugin %s: checked %s", r.PluginID, r.CheckedAt.UTC().Format(time.RFC3339))
	if r.ControllerNodeID != "" {
		fmt.Fprintf(w, " through the controller on node %s", r.ControllerNodeID)
	}
	fmt.Fprintf(w, "; the storage lists %d volumes, %d of them known here\n", r.Volumes, r.Known)
	if r.Error != "" {
		fmt.Fprintf(w, "Last round failed: %s (the findings below are from the last round that listed the storage)\n", r.Error)
	}
	if r.Unsupported != "" {
		fmt.Fprintf(w, "Not compared: %s\n", r.Unsupported)
	}
	findings := r.Findings
	if volumeID != "" {
		findings = r.ForVolume(volumeID)
	}
	if len(findings) == 0 {
		if r.Unsupported == "" {
			fmt.Fprintln(w, "The storage agrees with the record")
		}
		return
	}
	printFindings(w, findings)
	if r.UnknownTruncated > 0 && volumeID == "" {
		fmt.Fprintf(w, "... and %d more volumes claimd does not know\n", r.UnknownTruncated)
	}
}

// printFindings is the findings table: what disagrees, where, since when.
func printFindings(w io.Writer, findings []*structs.StorageFinding) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Finding\tVolume\tExternal ID\tNode\tAlloc\tFirst Seen\tMeaning")
	for _, f := range findings {
		node := f.NodeID
		if node == "" {
			node = f.ExternalNodeID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, orDash(f.VolumeID), f.ExternalID, orDash(node),
			orDash(f.AllocID), f.FirstSeen.UTC().Format(time.RFC3339), findingMeaning(f))
	}
	tw.Flush()
}

func findingMeaning(f *structs.StorageFinding) string {
	switch f.Kind {
	case structs.FindingOrphan:
		return "attached on the storage; no claim explains it"
	case structs.FindingMissing:
		return "claim recorded as attached; the storage does not show it"
	case structs.FindingAbnormal:
		return "the storage reports: " + f.Message
	default:
		return "on the storage; not registered here (left alone)"
	}
}

// storageSection is `volume status VOLUME`'s view of the storage: the
// last round of its plugin, and what it found about this volume.
func storageSection(ctx context.Context, c *api.Client, w io.Writer, v *structs.Volume) {
	reports, _, err := c.StorageReports(ctx, v.PluginID, structs.QueryOptions{AllowStale: true})
	if err != nil || len(reports) == 0 {
		return
	}
	r := reports[0]
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Storage")
	findings := r.ForVolume(v.ID)
	switch {
	case r.Unsupported != "" && len(findings) == 0:
		fmt.Fprintf(w, "Not compared: %s\n", r.Unsupported)
	case len(findings) == 0:
		fmt.Fprintf(w, "Agrees with the record (checked %s)\n", r.CheckedAt.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "Disagrees with the record (checked %s):\n", r.CheckedAt.UTC().Format(time.RFC3339))
		printFindings(w, findings)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "Last round failed: %s\n", r.Error)
	}
}

// showStorageBeforeForce prints what the storage says of a volume before an
// operator forces a detach or a deregister: whether it is still attached,
// and where. Best effort: a storage that cannot be asked is said so, and
// the forced command goes on (the operator asked for it).
func showStorageBeforeForce(ctx context.Context, c *api.Client, w io.Writer, volumeID string) {
	st, err := c.VolumeStorage(ctx, volumeID)
	switch {
	case err != nil:
		fmt.Fprintf(w, "Storage: could not ask the storage about %s: %v\n", volumeID, err)
	case !st.Found:
		fmt.Fprintf(w, "Storage: the storage does not list %s\n", volumeID)
	case !st.Supported:
		fmt.Fprintf(w, "Storage: %s exists; its controller does not report where it is attached\n", volumeID)
	case len(st.PublishedNodes) == 0:
		fmt.Fprintf(w, "Storage: %s is not attached to any node\n", volumeID)
	default:
		fmt.Fprintf(w, "Storage, before this detach: %s is attached to:", volumeID)
		for _, ext := range structs.SortedKeys(st.PublishedNodes) {
			if id := st.PublishedNodes[ext]; id != "" {
				fmt.Fprintf(w, " %s (node %s)", ext, id)
			} else {
				fmt.Fprintf(w, " %s", ext)
			}
		}
		fmt.Fprintln(w)
	}
}

// usageSection is `volume status VOLUME`'s live usage, one line per node
// holding a claim (best effort: nothing is shown when none can tell).
func usageSection(ctx context.Context, c *api.Client, w io.Writer, v *structs.Volume) {
	if len(v.ReadClaims)+len(v.WriteClaims) == 0 {
		return
	}
	usage, err := c.VolumeUsage(ctx, v.ID)
	if err != nil || len(usage) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Node\tAlloc\tUsed\tAvailable\tTotal\tInodes Used")
	for _, u := range usage {
		if u.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t- (%s)\n", u.NodeID, u.AllocID, u.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", u.NodeID, u.AllocID, u.BytesUsed, u.BytesAvailable, u.BytesTotal, u.InodesUsed)
	}
	tw.Flush()
}
