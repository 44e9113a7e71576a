package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

func runNodeStatus(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("node status", stdout, stderr).jsonFlag("print JSON").nodeAt(0)
	return x.run(args, atMost(1, "usage: claimd node status [-json] [NODE]"), func(ctx context.Context, c *api.Client, pos []string) int {
		return showOneOrAll(x, "node status", pos, func(id string) (*structs.Node, error) {
			n, _, err := c.Node(ctx, id, structs.QueryOptions{})
			return n, err
		}, func() ([]*structs.Node, error) {
			nodes, _, err := c.Nodes(ctx, structs.QueryOptions{})
			return nodes, err
		}, "No nodes", printNodeDetail, printNodes)
	})
}

// printNodes is `node status`'s table.
func printNodes(w io.Writer, nodes []*structs.Node) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tStatus\tEligibility\tVersion\tLease\tNode Plugins\tController Plugins")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, orDash(n.Name), n.Status, eligibilityText(n.Eligibility), orDash(n.Version),
			leaseText(n.Lease), nodePluginHealth(n, n.CSINodePlugins), nodePluginHealth(n, n.CSIControllerPlugins))
	}
	tw.Flush()
}

// printNodeDetail is `node status NODE`: the table row, then the node's
// last fence report when it has one.
func printNodeDetail(w io.Writer, n *structs.Node) {
	printNodes(w, []*structs.Node{n})
	f := n.LastFence
	if f == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Last Fence: began %s with %s of the lease left\n", f.At.UTC().Format(time.RFC3339), f.LeaseRemaining.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Alloc\tVolume\tHook\tUnmounted\tDone\tError")
	for _, v := range f.Volumes {
		hook := "ok"
		if !v.HookOK {
			hook = "failed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\n", v.AllocID, v.VolumeID, hook, v.Unmounted, v.Done.UTC().Format(time.RFC3339), orDash(v.Error))
	}
	tw.Flush()
}

func eligibilityText(e structs.NodeEligibility) string {
	if e == "" {
		return string(structs.NodeEligible)
	}
	return string(e)
}

// leaseText: 0 means the agent holds no lease (its fence-policy claims
// wait like wait-policy ones).
func leaseText(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

// nodePluginHealth is pluginHealth for a node's table row: a node that is
// not ready has not reported its plugins' health since it went away, so
// what it last reported is not shown as current.
func nodePluginHealth(n *structs.Node, m map[string]*structs.CSIInfo) string {
	if n.Status == structs.NodeStatusReady || len(m) == 0 {
		return pluginHealth(m)
	}
	var parts []string
	for _, id := range structs.SortedKeys(m) {
		parts = append(parts, id+"(unknown: node "+string(n.Status)+")")
	}
	return strings.Join(parts, ",")
}

func pluginHealth(m map[string]*structs.CSIInfo) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, id := range structs.SortedKeys(m) {
		h := "healthy"
		if !m[id].Healthy {
			h = "unhealthy"
		}
		parts = append(parts, id+"("+h+")")
	}
	return strings.Join(parts, ",")
}

func runPluginStatus(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("plugin status", stdout, stderr).jsonFlag("print JSON")
	return x.run(args, atMost(1, "usage: claimd plugin status [-json] [PLUGIN]"), func(ctx context.Context, c *api.Client, pos []string) int {
		return showOneOrAll(x, "plugin status", pos, func(id string) (*structs.Plugin, error) {
			p, _, err := c.Plugin(ctx, id, structs.QueryOptions{})
			return p, err
		}, func() ([]*structs.Plugin, error) {
			plugs, _, err := c.Plugins(ctx, structs.QueryOptions{})
			return plugs, err
		}, "No plugins", printPluginDetail, printPluginList)
	})
}

func runEvalList(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("eval list", stdout, stderr).jsonFlag("print JSON")
	status := x.fs.String("status", "", "only evals with this status (pending, complete, failed)")
	volume := x.fs.String("volume", "", "only this volume's evals")
	return x.run(args, nil, func(ctx context.Context, c *api.Client, _ []string) int {
		evals, _, err := c.Evals(ctx, structs.EvalStatus(*status), *volume, structs.QueryOptions{})
		return showList(x, "eval list", evals, err, "No evals", func(w io.Writer, evals []*structs.Eval) {
			sort.Slice(evals, func(i, j int) bool { return evals[i].CreateIndex < evals[j].CreateIndex })
			// Retry state is the leader's memory, not replicated: best effort.
			retries, _ := c.ReleaseStatus(ctx)
			printEvals(w, evals, retries)
		})
	})
}

// printEvals is `eval list`'s table, with the leader's retry state of
// pending evals.
func printEvals(w io.Writer, evals []*structs.Eval, retries map[string]structs.ReleaseStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tType\tVolume\tStatus\tTriggered By\tDescription\tRetry")
	for _, e := range evals {
		retry := "-"
		if e.Status == structs.EvalStatusPending {
			st, ok := retries[e.VolumeID]
			retry = formatRetry(st, ok)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Type, e.VolumeID, e.Status, orDash(e.TriggeredBy), orDash(e.StatusDescription), retry)
	}
	tw.Flush()
}

// printClaims shows a volume's live and past claims, and beside past
// claims the leader's retry state of the release.
func printClaims(w io.Writer, v *structs.Volume, retry *structs.ReleaseStatus) {
	type row struct {
		kind string
		c    *structs.Claim
	}
	var rows []row
	for _, id := range structs.SortedKeys(v.WriteClaims) {
		rows = append(rows, row{"live", v.WriteClaims[id]})
	}
	for _, id := range structs.SortedKeys(v.ReadClaims) {
		rows = append(rows, row{"live", v.ReadClaims[id]})
	}
	for _, id := range structs.SortedKeys(v.PastClaims) {
		rows = append(rows, row{"past", v.PastClaims[id]})
	}
	fmt.Fprintln(w)
	if len(rows) == 0 {
		fmt.Fprintln(w, "Claims: none")
		return
	}
	fmt.Fprintln(w, "Claims")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Alloc\tNode\tKind\tMode\tState\tNode Lost\tNotes")
	for _, r := range rows {
		note := "-"
		switch r.c.ReleasePath() {
		case structs.ReleasePathForced:
			note = "node detach skipped (forced)"
		case structs.ReleasePathFenced:
			note = "node fenced: lease ran out " + r.c.LeaseExpiredAt.UTC().Format(time.RFC3339)
		}
		if r.kind == "past" && retry != nil && r.c.State.Rank() < structs.ClaimStateNodeDetached.Rank() {
			note = formatRetry(*retry, true)
			if !retry.LeaseExpiresAt.IsZero() {
				note = "node lost: its lease runs out " + retry.LeaseExpiresAt.UTC().Format(time.RFC3339) + "; " + note
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.c.AllocID, r.c.NodeID, r.kind, r.c.Mode, r.c.State, orDash(string(r.c.NodeLost)), note)
	}
	tw.Flush()
}
