package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

func runRaftHealth(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("operator raft health", stdout, stderr).jsonFlag("print JSON")
	return x.run(args, noArgument, func(ctx context.Context, c *api.Client, _ []string) int {
		h, err := c.RaftHealth(ctx)
		if err != nil {
			return x.fail("raft health: %v", err)
		}
		code := 0
		if x.asJSON {
			h.Servers = orEmpty(h.Servers)
			code = x.json(h)
		} else {
			printRaftHealth(stdout, h)
		}
		// Scripts wait on the exit code: 2 while any server is unhealthy.
		if code == 0 && !h.Healthy {
			return 2
		}
		return code
	})
}

// printRaftHealth writes the table an operator reads: one line per server,
// then the verdict and the thresholds it was made with.
func printRaftHealth(w io.Writer, h *structs.RaftHealthResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Node\tID\tAddress\tState\tVoter\tStatus\tHealthy\tLast Contact\tLast Index\tIndex Lag\tVersion")
	for _, s := range h.Servers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%t\t%s\t%d\t%d\t%s\n", orDash(s.Name), s.ID, s.Address, raftState(s.Leader), s.Voter,
			s.Status, s.Healthy, roundDuration(s.LastContact), s.LastIndex, s.IndexLag, orDash(s.Version))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nHealthy: %t (failure tolerance %d)\n", h.Healthy, h.FailureTolerance)
	if len(h.EntryFeatures) > 0 {
		fmt.Fprintf(w, "Entry features every server applies: %s\n", strings.Join(h.EntryFeatures, ", "))
	} else {
		fmt.Fprintln(w, "Entry features every server applies: none yet")
	}
	cleanup := "off"
	if h.CleanupDeadServers {
		cleanup = fmt.Sprintf("on, after %s unreachable", roundDuration(h.DeadServerThreshold))
		if h.MinQuorum > 0 {
			cleanup += fmt.Sprintf(", never below %d voters", h.MinQuorum)
		}
	}
	fmt.Fprintf(w, "Thresholds: last contact %s, index lag %d; dead-server cleanup %s\n",
		roundDuration(h.LastContactThreshold), h.MaxTrailingLogs, cleanup)
}

// roundDuration shows a contact time the way an operator compares it:
// milliseconds below a second, tenths of a second above.
func roundDuration(d structs.HumanDuration) string {
	switch v := time.Duration(d); {
	case v < 0:
		return "never"
	case v < time.Second:
		return v.Round(time.Millisecond).String()
	default:
		return v.Round(100 * time.Millisecond).String()
	}
}
