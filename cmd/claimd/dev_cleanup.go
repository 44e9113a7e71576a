package main

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/claimd/claimd/internal/mountinfo"
)

// removeDevDir removes the dev agent's temporary data directory when it
// stops: first the volumes its client mounted there (bind mounts of
// allocations still running), deepest first, then the files. What cannot
// be removed is said, with where it is.
func removeDevDir(dir string, out io.Writer) {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		fmt.Fprintf(out, "dev agent: could not read the mount table (%v); left %s\n", err, dir)
		return
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, 0); err != nil {
			// Busy (a shell sitting in it): detach it from the tree now,
			// the kernel frees it when the last user goes.
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				fmt.Fprintf(out, "dev agent: could not unmount %s: %v; left %s\n", m, err, dir)
				return
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(out, "dev agent: could not remove %s: %v\n", dir, err)
		return
	}
	if len(mounts) > 0 {
		fmt.Fprintf(out, "dev agent: unmounted %d volume(s) and removed %s\n", len(mounts), dir)
	} else {
		fmt.Fprintf(out, "dev agent: removed %s (give -data-dir to keep the state)\n", dir)
	}
}
