package chaos

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// The checker's memory. A 30-minute netns run (112,382 operations) passed
// its linearizability check and was then killed by the kernel at 24 GB of
// RSS: porcupine's search caches grow with the operations in flight at
// once, the race detector multiplies every heap byte, and the Go runtime
// lets the heap reach twice what is live before it collects. Three things
// keep a long run inside the machine: a soft memory limit (the collector
// works harder instead of the kernel killing the process), the heap given
// back to the OS once the search is over, and a log line with the high
// water mark after each end check, so the next run that comes close says
// which step did it.

// boundCheckerMemory sets the Go runtime's soft memory limit to a third of
// the machine's memory (the servers and agents of the netns backend are
// other processes on the same machine and need the rest) and returns a
// func that restores the previous limit.
func boundCheckerMemory() (restore func()) {
	total := memTotal()
	if total <= 0 {
		return func() {}
	}
	prev := debug.SetMemoryLimit(total / 3)
	return func() { debug.SetMemoryLimit(prev) }
}

// releaseMemory runs a collection and gives what it freed back to the OS:
// after the linearizability search, gigabytes of its caches are garbage.
func releaseMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// memoryNote describes the process's resident memory now and at its peak
// (VmRSS, VmHWM), for the log.
func memoryNote() string {
	st := procStatus()
	return fmt.Sprintf("rss %s, peak %s", st["VmRSS"], st["VmHWM"])
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

func procStatus() map[string]string {
	out := map[string]string{"VmRSS": "?", "VmHWM": "?"}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && (k == "VmRSS" || k == "VmHWM") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
