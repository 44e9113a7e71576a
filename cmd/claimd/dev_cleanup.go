package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// removeDevDir removes the dev agent's temporary data directory when it
// stops: first the volumes its client mounted there (bind mounts of
// allocations still running), deepest first, then the files. What cannot
// be removed is said, with where it is.
func removeDevDir(dir string, out io.Writer) {
	mounts, err := mountsUnder(dir)
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

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountsUnder(f, dir)
}

func parseMountsUnder(r io.Reader, dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// mountinfo: ID parent major:minor root MOUNTPOINT options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
