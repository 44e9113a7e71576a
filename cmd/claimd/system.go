package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

func runSystemGC(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("system gc", stdout, stderr)
	return x.run(args, nil, func(ctx context.Context, c *api.Client, _ []string) int {
		out, err := c.GarbageCollect(ctx, "")
		if err != nil {
			return x.fail("system gc: %v", err)
		}
		return x.done(nil, "system gc", "Claim GC done: %d evals created; pending releases retried now; %d finished allocations without claims removed\n",
			out.EvalsCreated, out.AllocsRemoved)
	})
}

func runVolumeDetach(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("volume detach", stdout, stderr).nodeAt(1)
	force := x.fs.Bool("force", false, "skip the node detach: for a node that is gone for good (its mounts are not cleaned up)")
	return x.run(args, exactly(2, "usage: claimd volume detach [-force] VOLUME NODE"), func(ctx context.Context, c *api.Client, pos []string) int {
		if *force {
			showStorageBeforeForce(ctx, c, stderr, pos[0])
		}
		resp, err := c.DetachVolume(ctx, pos[0], pos[1], *force)
		if err != nil {
			return x.fail("volume detach: %v", err)
		}
		// What the servers recorded, not what the storage has done yet:
		// the release goes on in the background, in order.
		if len(resp.Released) > 0 {
			fmt.Fprintf(stdout, "Release started for the claims of allocs: %s (node detach, then controller detach; `claimd volume status %s` shows when they are freed)\n",
				strings.Join(resp.Released, ", "), pos[0])
		}
		if len(resp.Forced) > 0 {
			fmt.Fprintf(stderr, "Warning: node detach skipped (forced) for allocs: %s; the controller detach follows\n", strings.Join(resp.Forced, ", "))
		}
		return 0
	})
}

// formatRetry renders a release's retry state for a table cell.
func formatRetry(st structs.ReleaseStatus, ok bool) string {
	if !ok {
		return "-"
	}
	next := time.Until(st.NextTry).Round(100 * time.Millisecond)
	if next < 0 {
		next = 0
	}
	msg := cutAtWord(st.LastError, 200)
	return fmt.Sprintf("attempts=%d next=%s last=%q", st.Attempts, next, msg)
}

// cutAtWord shortens s to at most n bytes, at a space, so that a node ID
// or a volume ID in a release error is shown whole or not at all (an
// 80-byte cut used to leave "node detach: node 90b7...").
func cutAtWord(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := strings.LastIndexByte(s[:n], ' ')
	if cut <= 0 {
		cut = n
	}
	return s[:cut] + " ..."
}
