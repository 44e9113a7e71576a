package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/claimd/claimd/structs"
)

// printPluginDetail shows one plugin with what it advertises and, per
// instance, the node facts claims are checked against (max volumes,
// topology), so an operator sees why a command or a claim is refused.
func printPluginDetail(w io.Writer, p *structs.Plugin) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\t%s\n", p.ID)
	fmt.Fprintf(tw, "Provider\t%s %s\n", orDash(p.Provider), p.ProviderVersion)
	fmt.Fprintf(tw, "Controller Required\t%t\n", p.ControllerRequired)
	fmt.Fprintf(tw, "Controllers Healthy\t%d/%d\n", p.ControllersHealthy, len(p.Controllers))
	if p.ControllersPending > 0 {
		// Pending controllers receive no call until admitted (issue 38).
		fmt.Fprintf(tw, "Controllers Pending\t%d (claimd plugin admit %s NODE)\n", p.ControllersPending, p.ID)
	}
	fmt.Fprintf(tw, "Nodes Healthy\t%d/%d\n", p.NodesHealthy, len(p.Nodes))
	fmt.Fprintf(tw, "Controller Capabilities\t%s\n", capList(p.ControllerCapabilities.Names(), p.ControllerCapabilities == nil))
	fmt.Fprintf(tw, "Node Capabilities\t%s\n", capList(p.NodeCapabilities.Names(), p.NodeCapabilities == nil))
	tw.Flush()

	if len(p.Controllers) > 0 {
		fmt.Fprintln(w, "\nControllers")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Node\tHealthy\tAdmission\tDescription")
		for _, id := range structs.SortedKeys(p.Controllers) {
			c := p.Controllers[id]
			fmt.Fprintf(tw, "%s\t%t\t%s\t%s\n", id, c.Healthy, admissionText(p, id), orDash(c.HealthDescription))
		}
		tw.Flush()
	}
	if len(p.Nodes) > 0 {
		fmt.Fprintln(w, "\nNodes")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Node\tHealthy\tExternal ID\tMax Volumes\tTopology\tDescription")
		for _, id := range structs.SortedKeys(p.Nodes) {
			n := p.Nodes[id]
			fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%s\n", id, n.Healthy, orDash(n.ExternalNodeID),
				maxVolumesText(n.MaxVolumes), orDash(structs.FormatSegments(n.AccessibleTopology)),
				orDash(n.HealthDescription))
		}
		tw.Flush()
	}
}

// printPluginList is `plugin status` without an ID: one line per plugin
// with its healthy counts and what it advertises, in the names the detail
// view uses.
func printPluginList(w io.Writer, plugs []*structs.Plugin) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tProvider\tController Required\tControllers Healthy\tNodes Healthy\tController Capabilities\tNode Capabilities\tControllers Pending")
	for _, p := range plugs {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%d/%d\t%d/%d\t%s\t%s\t%d\n", p.ID, orDash(p.Provider), p.ControllerRequired,
			p.ControllersHealthy, len(p.Controllers), p.NodesHealthy, len(p.Nodes),
			capSummary(p.ControllerCapabilities.Names(), p.ControllerCapabilities == nil),
			capSummary(p.NodeCapabilities.Names(), p.NodeCapabilities == nil), p.ControllersPending)
	}
	tw.Flush()
}

// capSummary is capList without spaces, so a table column stays one word.
func capSummary(names []string, unknown bool) string {
	return strings.ReplaceAll(capList(names, unknown), ", ", ",")
}

// capList tells "not reported" (no healthy fingerprint yet) from "none".
func capList(names []string, unknown bool) string {
	switch {
	case unknown:
		return "(not reported)"
	case len(names) == 0:
		return "none"
	}
	return strings.Join(names, ", ")
}

func maxVolumesText(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10)
}

// admissionText is how the controller on node came to receive calls, or
// "pending" when it does not.
func admissionText(p *structs.Plugin, node string) string {
	if a := p.Admissions[node]; a != nil {
		return a.Source
	}
	return "pending"
}
