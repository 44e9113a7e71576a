package main

import (
	"context"
	"fmt"
	"io"

	"github.com/claimd/claimd/api"
)

// runNodePurge is `claimd node purge NODE`: frees a deregistered node's ID
// (a management token's). The ID is otherwise bound to the node's secret
// for good; the output says what becomes of the claims the node held.
func runNodePurge(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("node purge", stdout, stderr).jsonFlag("print the answer as JSON").nodeAt(0)
	return x.run(args, exactly(1, "usage: claimd node purge NODE"), func(ctx context.Context, c *api.Client, pos []string) int {
		out, err := c.PurgeNode(ctx, pos[0])
		if err != nil {
			return x.fail("node purge: %v", err)
		}
		if x.asJSON {
			return x.json(out)
		}
		fmt.Fprintf(stdout, "Node %s purged: its ID may be registered again, with any secret\n", out.NodeID)
		for _, c := range out.Claims {
			fmt.Fprintf(stdout, "  claim still held: %s\n", c)
		}
		fmt.Fprintln(stdout, out.Note)
		return 0
	})
}
