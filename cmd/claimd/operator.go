package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/claimd/claimd/api"
)

func runListPeers(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("operator raft list-peers", stdout, stderr)
	stale := x.fs.Bool("stale", false, "answer from the contacted server's view instead of the leader's")
	return x.run(args, nil, func(ctx context.Context, c *api.Client, _ []string) int {
		conf, err := c.RaftConfiguration(ctx, *stale)
		if err != nil {
			return x.fail("list peers: %v", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Node\tID\tAddress\tState\tVoter\tVersion")
		for _, s := range conf.Servers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\n", orDash(s.Node), s.ID, s.Address, raftState(s.Leader), s.Voter, orDash(s.Version))
		}
		tw.Flush()
		return 0
	})
}

// raftState is a server's state column: leader or follower.
func raftState(leader bool) string {
	if leader {
		return "leader"
	}
	return "follower"
}

func runRemovePeer(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("operator raft remove-peer", stdout, stderr)
	id := x.fs.String("id", "", "Raft ID of the server to remove")
	peerAddr := x.fs.String("peer-address", "", "address of the server to remove (when the ID is unknown)")
	check := func([]string) error {
		return require(*id != "" || *peerAddr != "", "-id or -peer-address is required")
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, _ []string) int {
		err := c.RaftRemovePeer(ctx, *id, *peerAddr)
		return x.done(err, "remove peer", "Removed peer %s\n", *id+*peerAddr)
	})
}

func runTransferLeader(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("operator raft transfer-leader", stdout, stderr)
	id := x.fs.String("id", "", "Raft ID of the new leader (default: Raft picks)")
	return x.run(args, nil, func(ctx context.Context, c *api.Client, _ []string) int {
		return x.done(c.TransferLeadership(ctx, *id), "transfer leadership", "Leadership transferred\n")
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
