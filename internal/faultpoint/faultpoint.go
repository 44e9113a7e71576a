// Package faultpoint lets a test stop a real claimd process at a named
// point, to put a fault exactly where a race would need it: a leader
// paused (SIGSTOP) between deciding a storage call and making it (decision
// 45). A test arms a point by writing its name as a line of the file that
// $CLAIMD_FAULT_POINTS names before the process starts; the process stops
// itself the first time it reaches the point, and goes on from there when
// it is sent SIGCONT. Without the variable (in production) Stop does
// nothing but compare a string.
package faultpoint

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// Env names the variable that holds the fault-point file's path.
const Env = "CLAIMD_FAULT_POINTS"

var (
	file = os.Getenv(Env)
	mu   sync.Mutex
)

// Stop stops this process at point if a test armed it, once per arming
// (the point's line is removed from the file first).
func Stop(point string) {
	if file == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != point {
			continue
		}
		rest := append(lines[:i:i], lines[i+1:]...)
		if os.WriteFile(file, []byte(strings.Join(rest, "\n")), 0o600) != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "fault point %s: stopping\n", point)
		// To this thread: a stop sent to the process may be taken by
		// another thread while this one runs on for a while (seen: 200 ms,
		// long enough to make the call); one sent to this thread stops
		// the process before the system call returns.
		runtime.LockOSThread()
		_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
		runtime.UnlockOSThread()
		fmt.Fprintf(os.Stderr, "fault point %s: resumed\n", point)
		return
	}
}
