package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

func runListPeers(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("operator raft list-peers", stderr)
	cf.register(fs)
	stale := fs.Bool("stale", false, "answer from the contacted server's view instead of the leader's")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	conf, err := c.RaftConfiguration(ctx, *stale)
	if err != nil {
		return fail(stderr, "list peers: %v", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Node\tID\tAddress\tState\tVoter")
	for _, s := range conf.Servers {
		state := "follower"
		if s.Leader {
			state = "leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", orDash(s.Node), s.ID, s.Address, state, s.Voter)
	}
	tw.Flush()
	return 0
}

func runRemovePeer(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("operator raft remove-peer", stderr)
	cf.register(fs)
	id := fs.String("id", "", "Raft ID of the server to remove")
	peerAddr := fs.String("peer-address", "", "address of the server to remove (when the ID is unknown)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if *id == "" && *peerAddr == "" {
		return fail(stderr, "-id or -peer-address is required")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	if err := c.RaftRemovePeer(ctx, *id, *peerAddr); err != nil {
		return fail(stderr, "remove peer: %v", err)
	}
	fmt.Fprintln(stdout, "Removed peer", *id+*peerAddr)
	return 0
}

func runTransferLeader(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("operator raft transfer-leader", stderr)
	cf.register(fs)
	id := fs.String("id", "", "Raft ID of the new leader (default: Raft picks)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	if err := c.TransferLeadership(ctx, *id); err != nil {
		return fail(stderr, "transfer leadership: %v", err)
	}
	fmt.Fprintln(stdout, "Leadership transferred")
	return 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
