package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/claimd/claimd/structs"
)

func runNodeStatus(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("node status", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	var nodes []*structs.Node
	if fs.NArg() == 1 {
		n, _, err := c.Node(ctx, fs.Arg(0), structs.QueryOptions{})
		if err != nil {
			return fail(stderr, "node status: %v", err)
		}
		if *asJSON {
			return jsonOut(stdout, stderr, n)
		}
		nodes = []*structs.Node{n}
	} else {
		if nodes, _, err = c.Nodes(ctx, structs.QueryOptions{}); err != nil {
			return fail(stderr, "node status: %v", err)
		}
		if *asJSON {
			if nodes == nil {
				nodes = []*structs.Node{}
			}
			return jsonOut(stdout, stderr, nodes)
		}
	}
	if len(nodes) == 0 {
		fmt.Fprintln(stdout, "No nodes")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tStatus\tNode Plugins\tController Plugins")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.ID, orDash(n.Name), n.Status,
			pluginHealth(n.CSINodePlugins), pluginHealth(n.CSIControllerPlugins))
	}
	tw.Flush()
	return 0
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
	var cf cliFlags
	fs := newFlagSet("plugin status", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	var plugs []*structs.Plugin
	if fs.NArg() == 1 {
		p, _, err := c.Plugin(ctx, fs.Arg(0), structs.QueryOptions{})
		if err != nil {
			return fail(stderr, "plugin status: %v", err)
		}
		if *asJSON {
			return jsonOut(stdout, stderr, p)
		}
		printPluginDetail(stdout, p)
		return 0
	} else {
		if plugs, _, err = c.Plugins(ctx, structs.QueryOptions{}); err != nil {
			return fail(stderr, "plugin status: %v", err)
		}
		if *asJSON {
			if plugs == nil {
				plugs = []*structs.Plugin{}
			}
			return jsonOut(stdout, stderr, plugs)
		}
	}
	if len(plugs) == 0 {
		fmt.Fprintln(stdout, "No plugins")
		return 0
	}
	printPluginList(stdout, plugs)
	return 0
}

func runEvalList(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("eval list", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	status := fs.String("status", "", "only evals with this status (pending, complete, failed)")
	volume := fs.String("volume", "", "only this volume's evals")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	evals, _, err := c.Evals(ctx, structs.EvalStatus(*status), *volume, structs.QueryOptions{})
	if err != nil {
		return fail(stderr, "eval list: %v", err)
	}
	if *asJSON {
		if evals == nil {
			evals = []*structs.Eval{}
		}
		return jsonOut(stdout, stderr, evals)
	}
	if len(evals) == 0 {
		fmt.Fprintln(stdout, "No evals")
		return 0
	}
	sort.Slice(evals, func(i, j int) bool { return evals[i].CreateIndex < evals[j].CreateIndex })
	// Retry state is the leader's memory, not replicated: best effort.
	retries, _ := c.ReleaseStatus(ctx)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
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
	return 0
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
	fmt.Fprintln(tw, "Alloc\tNode\tKind\tMode\tState\tNotes")
	for _, r := range rows {
		note := "-"
		if r.c.NodeDetachSkipped {
			note = "node detach skipped (forced)"
		}
		if r.kind == "past" && retry != nil {
			note = formatRetry(*retry, true)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.c.AllocID, r.c.NodeID, r.kind, r.c.Mode, r.c.State, note)
	}
	tw.Flush()
}
