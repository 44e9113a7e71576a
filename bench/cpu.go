package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPU per claim cycle (issue 20). A rate (calls/s) falls when other
// processes take the cores; the CPU time a server spends per call moves
// much less, so it is the figure to compare across runs on a shared
// machine. The tool reads each server's user+system CPU time from
// /proc/PID/stat at the start and at the end of the measured window. It
// learns the PIDs from the servers themselves (Status.Runtime reports
// its process ID), and measures only servers that provably run on this
// machine as processes of their own: a loopback address, a /proc entry
// for the PID, and no two servers (or the tool) sharing a process. In
// any other case the run says why it has no CPU figures (Result.NoCPU).

// userHZ is the unit of utime and stime in /proc/PID/stat. The kernel
// reports them in USER_HZ, which is 100 on every Linux architecture Go
// supports (the value sysconf(_SC_CLK_TCK) returns; Go cannot call
// sysconf without cgo).
const userHZ = 100

// ServerCPU is one server process's CPU time over a measured window.
type ServerCPU struct {
	Address string `json:"address"`
	PID     int    `json:"pid"`
	// Seconds is user + system CPU time, summed over the process's threads.
	Seconds float64 `json:"cpu_seconds"`
}

// cpuMeter reads the servers' CPU times; servers maps address → PID.
type cpuMeter struct {
	servers map[string]int
	// reason is why there is no meter when servers is empty.
	reason string
}

// runtimeReader asks one server for its process ID (Status.Runtime).
type runtimeReader func(ctx context.Context, addr string) (pid int, err error)

// newCPUMeter asks every server for its PID and keeps the servers whose
// CPU this process can read honestly (see above).
func newCPUMeter(ctx context.Context, servers []string, pidOf runtimeReader) *cpuMeter {
	m := &cpuMeter{servers: map[string]int{}}
	owner := map[int]string{}
	for _, addr := range servers {
		if !isLoopback(addr) {
			return &cpuMeter{reason: fmt.Sprintf("server %s is not on a loopback address: its process may be on another machine", addr)}
		}
		pid, err := pidOf(ctx, addr)
		switch {
		case err != nil:
			return &cpuMeter{reason: fmt.Sprintf("server %s did not report its process ID: %v", addr, err)}
		case pid <= 0:
			return &cpuMeter{reason: fmt.Sprintf("server %s reports no process ID (older than the field)", addr)}
		case pid == os.Getpid():
			return &cpuMeter{reason: "the servers run inside this process: their CPU cannot be told from the load generator's"}
		case owner[pid] != "":
			return &cpuMeter{reason: fmt.Sprintf("servers %s and %s share process %d: no per-server CPU", owner[pid], addr, pid)}
		}
		if _, err := readCPUTicks(pid); err != nil {
			return &cpuMeter{reason: fmt.Sprintf("server %s (pid %d): %v", addr, pid, err)}
		}
		owner[pid] = addr
		m.servers[addr] = pid
	}
	return m
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readCPUTicks is a process's utime + stime in USER_HZ ticks. The second
// field of /proc/PID/stat is the command name in parentheses, which may
// hold spaces: fields are counted after its closing parenthesis.
func readCPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	n, err := parseCPUTicks(string(b))
	if err != nil {
		return 0, fmt.Errorf("read CPU time: /proc/%d/stat: %w", pid, err)
	}
	return n, nil
}

func parseCPUTicks(s string) (int64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command field")
	}
	// After ")": state (field 3), ..., utime (14), stime (15).
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command, want at least 13", len(f))
	}
	var total int64
	for _, x := range f[11:13] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", x)
		}
		total += n
	}
	return total, nil
}

// readRSS is a process's resident set size in bytes (VmRSS in
// /proc/PID/status).
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n * 1024, nil
				}
			}
			return 0, fmt.Errorf("read RSS: /proc/%d/status: %q is not a size in kB", pid, line)
		}
	}
	return 0, fmt.Errorf("read RSS: /proc/%d/status has no VmRSS line", pid)
}

// forget stops measuring a server (scale mode killed it).
func (m *cpuMeter) forget(addr string) { delete(m.servers, addr) }

// cpuSample is every measured server's ticks at one moment.
type cpuSample struct {
	at    time.Time
	ticks map[string]int64
	err   error
}

func (m *cpuMeter) sample() cpuSample {
	s := cpuSample{at: time.Now(), ticks: make(map[string]int64, len(m.servers))}
	for addr, pid := range m.servers {
		t, err := readCPUTicks(pid)
		if err != nil {
			s.err = fmt.Errorf("server %s (pid %d): %w", addr, pid, err)
			return s
		}
		s.ticks[addr] = t
	}
	return s
}

// measure samples at w.start and at w.end (or at the returned finish,
// when that comes first) in the background. finish records the servers'
// CPU over that span in res (or why there is none).
func (m *cpuMeter) measure(w window) (finish func(res *Result)) {
	if m == nil || len(m.servers) == 0 {
		reason := "no servers to measure"
		if m != nil && m.reason != "" {
			reason = m.reason
		}
		return func(res *Result) { res.NoCPU = reason }
	}
	stop := make(chan struct{})
	var once sync.Once
	var first, last cpuSample
	done := make(chan struct{})
	go func() {
		defer close(done)
		timer := time.NewTimer(time.Until(w.start))
		defer timer.Stop()
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		first = m.sample()
		timer.Reset(time.Until(w.end))
		select {
		case <-stop:
		case <-timer.C:
		}
		last = m.sample()
	}()
	return func(res *Result) {
		once.Do(func() { close(stop) })
		<-done
		switch {
		case first.ticks == nil:
			res.NoCPU = "the run ended before its measured window"
			return
		case first.err != nil:
			res.NoCPU = first.err.Error()
			return
		case last.err != nil:
			res.NoCPU = last.err.Error()
			return
		}
		res.CPUWallSeconds = last.at.Sub(first.at).Seconds()
		var total float64
		for addr, pid := range m.servers {
			secs := float64(last.ticks[addr]-first.ticks[addr]) / userHZ
			total += secs
			res.ServerCPU = append(res.ServerCPU, ServerCPU{Address: addr, PID: pid, Seconds: secs})
			if addr == res.Address {
				res.TargetCPUSeconds = secs
			}
		}
		res.CPUSeconds = total
		sortServerCPU(res.ServerCPU)
	}
}

func sortServerCPU(s []ServerCPU) {
	slices.SortFunc(s, func(a, b ServerCPU) int { return strings.Compare(a.Address, b.Address) })
}

// setCycles records the run's claim cycles and the CPU per cycle. A claim
// cycle is one (alloc, volume) pair claimed and released again: in claim
// mode one release in the window (each follows one successful claim), in
// contended mode one win (a claim won, held, released). The CPU of the
// release pipeline those releases set off (node detach, checkpoint, free)
// falls in the same window, lagging by a few milliseconds, and counts.
func (res *Result) setCycles(cycles int64) {
	res.Cycles = cycles
	if cycles <= 0 || res.ServerCPU == nil {
		return
	}
	// A run whose pool ran out early stops the meter when its callers
	// stop, so the CPU and the cycles cover about the same span.
	res.CPUMSPerCycle = 1000 * res.CPUSeconds / float64(cycles)
	res.TargetCPUMSPerCycle = 1000 * res.TargetCPUSeconds / float64(cycles)
}
