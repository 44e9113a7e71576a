package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// exitDrainUnfinished is `node drain`'s exit code when its deadline passed
// with claims left: not a failure of the command, a state to act on.
const exitDrainUnfinished = 2

// runNodeDrain is `claimd node drain [-deadline D] [-dry-run] [-json] NODE`.
func runNodeDrain(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("node drain", stdout, stderr).jsonFlag("print the plan (and, for a drain, the final status) as JSON").nodeAt(0)
	deadline := x.fs.Duration("deadline", 10*time.Minute, "how long to wait for every claim on the node to be freed; then exit 2 with what is left")
	dryRun := x.fs.Bool("dry-run", false, "print which volumes would detach, in which order, which plugins must stay up and what would block; change nothing")
	return x.run(args, exactly(1, "usage: claimd node drain [-deadline 10m] [-dry-run] [-json] NODE"), func(ctx context.Context, c *api.Client, pos []string) int {
		node := pos[0]
		resp, err := c.DrainNode(ctx, node, *dryRun)
		if err != nil {
			return x.fail("node drain: %v", err)
		}
		if *dryRun {
			if x.asJSON {
				return x.json(resp.Plan)
			}
			printDrainPlan(stdout, resp.Plan, true)
			return 0
		}
		if !x.asJSON {
			printDrainPlan(stdout, resp.Plan, false)
		}
		st, err := waitDrained(c, node, resp.Index, *deadline, x.asJSON, stdout)
		if x.asJSON {
			if rc := x.json(map[string]any{"plan": resp.Plan, "status": st}); rc != 0 {
				return rc
			}
		}
		switch {
		case err == nil:
			if !x.asJSON {
				fmt.Fprintf(stdout, "Drain complete: %d claims freed; node plugins on %s (%s) may now be stopped\n",
					len(resp.Plan.Volumes), node, orDash(strings.Join(resp.Plan.PluginsKeepUp, ",")))
			}
			return 0
		case errors.Is(err, errDrainDeadline):
			fmt.Fprintf(stderr, "node drain: the deadline (%s) passed with work left on %s:\n", *deadline, node)
			printDrainLeft(stderr, st)
			return exitDrainUnfinished
		default:
			return x.fail("node drain: %v", err)
		}
	})
}

var errDrainDeadline = errors.New("deadline passed")

// waitDrained follows the drain by blocking query until nothing is left
// or the deadline passes, printing each change of what is left. Its own
// clock bounds it: each query's wait ends before the deadline.
func waitDrained(c *api.Client, node string, index uint64, deadline time.Duration, quiet bool, w io.Writer) (*structs.NodeDrainStatus, error) {
	end := time.Now().Add(deadline)
	var last *structs.NodeDrainStatus
	lastLine := ""
	for {
		left := time.Until(end)
		if left <= 0 {
			return last, errDrainDeadline
		}
		wait := min(left, 30*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
		st, meta, err := c.NodeDrainStatus(ctx, node, structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: wait, AllowStale: true})
		cancel()
		if err != nil {
			if time.Until(end) <= 0 {
				return last, errDrainDeadline
			}
			if structs.IsRetryable(err) {
				continue
			}
			return last, err
		}
		last = st
		if meta.Index > index {
			index = meta.Index
		}
		if line := drainProgress(st); !quiet && line != lastLine {
			fmt.Fprintf(w, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line)
			lastLine = line
		}
		if st.Done {
			return st, nil
		}
	}
}

func drainProgress(st *structs.NodeDrainStatus) string {
	return fmt.Sprintf("%d allocations running, %d claims left", len(st.AllocsLeft), len(st.ClaimsLeft))
}

// printDrainPlan shows what a drain does.
func printDrainPlan(w io.Writer, p *structs.DrainPlan, dryRun bool) {
	verb := "Draining"
	if dryRun {
		verb = "Dry run: a drain of"
	}
	fmt.Fprintf(w, "%s node %s: ineligible for new claims, %d allocations stopped, %d claims released\n",
		verb, p.NodeID, len(p.Allocs), len(p.Volumes))
	if len(p.Volumes) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Order\tVolume\tAlloc\tMode\tState\tSteps")
		for i, v := range p.Volumes {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i+1, v.VolumeID, v.AllocID, v.Mode, v.State, strings.Join(v.Steps, ", then "))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "Node plugins that must keep serving until the drain is done: %s\n", orDash(strings.Join(p.PluginsKeepUp, ", ")))
	if len(p.Blockers) == 0 {
		fmt.Fprintln(w, "Nothing blocks it now")
		return
	}
	fmt.Fprintln(w, "What would block it:")
	for _, b := range p.Blockers {
		fmt.Fprintf(w, "  - %s\n", b)
	}
}

// printDrainLeft shows what a drain still waits for.
func printDrainLeft(w io.Writer, st *structs.NodeDrainStatus) {
	if st == nil {
		fmt.Fprintln(w, "  (no status could be read)")
		return
	}
	for _, a := range st.AllocsLeft {
		fmt.Fprintf(w, "  allocation %s has not stopped\n", a)
	}
	for _, c := range st.ClaimsLeft {
		line := fmt.Sprintf("  volume %s (alloc %s): claim %s", c.VolumeID, c.AllocID, c.State)
		if c.LastError != "" {
			line += "; last error: " + c.LastError
		}
		fmt.Fprintln(w, line)
	}
}

// runNodeEligibility is `claimd node eligibility -enable|-disable NODE`.
func runNodeEligibility(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("node eligibility", stdout, stderr).nodeAt(0)
	enable := x.fs.Bool("enable", false, "let the node take new claims")
	disable := x.fs.Bool("disable", false, "refuse new claims on the node (live claims stay)")
	usage := "usage: claimd node eligibility -enable|-disable NODE"
	return x.run(args, func(pos []string) error {
		if len(pos) != 1 {
			return errors.New(usage)
		}
		if *enable == *disable {
			return errors.New("exactly one of -enable and -disable is required; " + usage)
		}
		return nil
	}, func(ctx context.Context, c *api.Client, pos []string) int {
		_, err := c.UpdateNodeEligibility(ctx, pos[0], *enable)
		state := "ineligible for new claims"
		if *enable {
			state = "eligible for new claims"
		}
		return x.done(err, "node eligibility", "Node %s is %s\n", pos[0], state)
	})
}
