package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/claimd/claimd/structs"
)

func runSystemGC(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("system gc", stderr)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	n, err := c.SystemGC(ctx)
	if err != nil {
		return fail(stderr, "system gc: %v", err)
	}
	fmt.Fprintf(stdout, "Claim GC done: %d evals created; pending releases retried now\n", n)
	return 0
}

func runVolumeDetach(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("volume detach", stderr)
	cf.register(fs)
	force := fs.Bool("force", false, "skip the node detach: for a node that is gone for good (its mounts are not cleaned up)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 2 {
		return fail(stderr, "usage: claimd volume detach [-force] VOLUME NODE")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	resp, err := c.DetachVolume(ctx, fs.Arg(0), fs.Arg(1), *force)
	if err != nil {
		return fail(stderr, "volume detach: %v", err)
	}
	if len(resp.Released) > 0 {
		fmt.Fprintf(stdout, "Released claims of allocs: %s\n", strings.Join(resp.Released, ", "))
	}
	if len(resp.Forced) > 0 {
		fmt.Fprintf(stderr, "Warning: node detach skipped (forced) for allocs: %s\n", strings.Join(resp.Forced, ", "))
	}
	return 0
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
	msg := st.LastError
	if len(msg) > 80 {
		msg = msg[:77] + "..."
	}
	return fmt.Sprintf("attempts=%d next=%s last=%q", st.Attempts, next, msg)
}
