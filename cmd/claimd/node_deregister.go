package main

import (
	"context"
	"fmt"
	"io"

	"github.com/claimd/claimd/api"
)

// runNodeDeregister is `claimd node deregister NODE`: removes a node that
// is gone for good (node:write). Its allocations become lost; its claims
// stay past claims that wait for the node's own unmount (it may come back
// on its own secret) or `volume detach -force`. Its ID stays bound to the
// node's secret until `node purge`.
func runNodeDeregister(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("node deregister", stdout, stderr).jsonFlag("print the answer as JSON").nodeAt(0)
	return x.run(args, exactly(1, "usage: claimd node deregister NODE"), func(ctx context.Context, c *api.Client, pos []string) int {
		index, err := c.DeregisterNodes(ctx, pos[0])
		if err != nil {
			return x.fail("node deregister: %v", err)
		}
		if x.asJSON {
			return x.json(map[string]any{"node_id": pos[0], "index": index})
		}
		fmt.Fprintf(stdout, "Node %s deregistered: its allocations are lost; its claims wait for the node's own unmount or `claimd volume detach -force VOLUME %s`\n", pos[0], pos[0])
		fmt.Fprintf(stdout, "Its ID stays bound to the node's secret; `claimd node purge %s` frees it\n", pos[0])
		return 0
	})
}
