package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Measurements (issue 41): tests that time a path over many runs and
// print p50/p99/max. They are skipped unless CLAIMD_MEASURE=1 (and under
// -short): they take minutes and their figures are for the notes, not
// asserted. Each still asserts the path's correctness on every run.
// Timing figures are comparable only when taken alone on the machine:
// run them under `flock /tmp/bench.lock`.

// measureRuns skips the test unless measuring, and returns how many runs
// to do: CLAIMD_MEASURE_RUNS, or def.
func measureRuns(t *testing.T, def int) int {
	t.Helper()
	if testing.Short() || os.Getenv("CLAIMD_MEASURE") != "1" {
		t.Skip("a measurement: set CLAIMD_MEASURE=1 to run it")
	}
	if n, err := strconv.Atoi(os.Getenv("CLAIMD_MEASURE_RUNS")); err == nil && n > 0 {
		return n
	}
	return def
}

// loadAvg is the machine's 1/5/15-minute load average, for the notes.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// summary is "runs=N p50=… p99=… max=…" (nearest rank; with fewer than
// 100 runs p99 is the largest).
func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "runs=0"
	}
	return fmt.Sprintf("runs=%d p50=%s p99=%s max=%s", len(ds),
		quantile(ds, 0.5).Round(time.Millisecond), quantile(ds, 0.99).Round(time.Millisecond),
		quantile(ds, 1).Round(time.Millisecond))
}
