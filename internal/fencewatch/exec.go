// Package fencewatch holds the decisions of the processes that stop
// writers from the node lease file (internal/leasefile) without the
// agent: `claimd exec`, which runs a workload and ends it, and `claimd
// keeper`, which runs the fence command for workloads claimd does not
// start. The decisions are pure functions of the file, the clock and the
// boot, so that they can be tested without processes; the commands in
// cmd/claimd do the reading, the signals and the logging.
package fencewatch

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/leasefile"
)

// DefaultDataDir is the client agent's data dir as packaged
// (packaging/config/client/client.hcl, the unit's StateDirectory): where
// exec and the keeper look for the lease file unless told otherwise.
const DefaultDataDir = "/var/lib/claimd-client"

// PollInterval is how often the lease file is read. Reading it is a
// small file from the page cache; 100 ms is well inside the shortest
// fence budget (a 2 s lease leaves 500 ms between FenceAt and Deadline).
const PollInterval = 100 * time.Millisecond

// DefaultStopGrace is the grace between SIGTERM and SIGKILL when the
// claim has no lease deadline to fit in (not a fence-policy claim: the
// agent stops it because the allocation stopped).
const DefaultStopGrace = 10 * time.Second

// Start is whether a workload may start now on the claims of one
// allocation.
type Start struct {
	// Ready: start it, tied to Claim.
	Ready bool
	Claim leasefile.Claim
	// Wait is why not yet (the agent is still mounting, the lease is not
	// yet shown live...): wait and look again.
	Wait string
	// Err: it never will (the allocation is being stopped, the request
	// is ambiguous): do not wait.
	Err error
}

// CheckStart decides whether the workload of (allocID, volumeID) may
// start: the claim is listed with its mount path, not being stopped, and
// leasefile.Judge holds it. volumeID "" means the allocation's only
// volume. f and readErr are one read of the file.
func CheckStart(f *leasefile.File, readErr error, allocID, volumeID string, now int64, bootID string) Start {
	if readErr != nil {
		if errors.Is(readErr, fs.ErrNotExist) {
			return Start{Wait: "no lease file yet (is the client agent running with this data dir?)"}
		}
		return Start{Wait: fmt.Sprintf("the lease file cannot be read: %v", readErr)}
	}
	if f.BootID != bootID {
		return Start{Wait: "the lease file is from another boot (the agent has not written it since this one began)"}
	}
	var claims []leasefile.Claim
	for _, c := range f.Claims {
		if c.AllocID == allocID && (volumeID == "" || c.VolumeID == volumeID) {
			claims = append(claims, c)
		}
	}
	what := "allocation " + allocID
	if volumeID != "" {
		what += " volume " + volumeID
	}
	switch {
	case len(claims) == 0:
		return Start{Wait: what + " is not mounted on this node yet"}
	case len(claims) > 1:
		ids := make([]string, len(claims))
		for i, c := range claims {
			ids[i] = c.VolumeID
		}
		return Start{Err: fmt.Errorf("-volume: %s has %d volumes on this node (%s): name the one the command uses", what, len(claims), strings.Join(ids, ", "))}
	}
	c := claims[0]
	switch {
	case c.Stopping:
		return Start{Err: fmt.Errorf("%s: the agent is releasing the claim (the allocation stopped or the volume is being detached); not starting the command", what)}
	case c.MountPath == "":
		return Start{Wait: what + " is being mounted"}
	}
	if v := leasefile.Judge(f, c.AllocID, c.VolumeID, c.Fenced(), now, bootID); v != leasefile.Hold {
		return Start{Wait: fmt.Sprintf("the node lease is not shown live (%s policy; the agent has not renewed it)", c.NodeLost)}
	}
	return Start{Ready: true, Claim: c}
}

// Check is the verdict on a running workload's claim: f nil when the
// file could not be read (a fence-policy claim is then fenced: the lease
// cannot be shown live; another keeps running until the agent says).
func Check(f *leasefile.File, c leasefile.Claim, now int64, bootID string) leasefile.Verdict {
	return leasefile.Judge(f, c.AllocID, c.VolumeID, c.Fenced(), now, bootID)
}

// KillGrace is how long after SIGTERM a workload stopped with verdict v
// gets SIGKILL. last is the last file read (nil: none); flag the
// operator's -kill-grace (0: derive it).
//
// For a fence-policy claim the whole stop must end before the lease's
// Deadline: the servers may give the volume to another node then. The
// agent's own fence starts at FenceAt; the default grace is half the
// window between FenceAt and Deadline, which leaves the other half for
// the poll's delay and the kill. A fence never waits past the Deadline
// whatever the flag says: the grace is at most half the time left, and
// none once it has passed.
func KillGrace(last *leasefile.File, c leasefile.Claim, v leasefile.Verdict, flag time.Duration, now int64) time.Duration {
	grace := flag
	if grace <= 0 {
		grace = DefaultStopGrace
		if c.Fenced() && last != nil && last.FenceAt > 0 && last.Deadline > last.FenceAt {
			grace = time.Duration(last.Deadline-last.FenceAt) / 2
		}
	}
	if c.Fenced() && last != nil && last.Deadline > 0 && (v == leasefile.Fence || flag <= 0) {
		left := time.Duration(last.Deadline-now) / 2
		if left <= 0 {
			return 0
		}
		grace = min(grace, left)
	}
	return grace
}

// Reason is what exec says when it stops the workload for v.
func Reason(v leasefile.Verdict) string {
	switch v {
	case leasefile.Fence:
		return "fenced: the node lease could not be shown live (the agent is gone, paused or cut off from the servers, or the lease file is unreadable)"
	case leasefile.Stop:
		return "stopped: the agent released the claim (the allocation stopped, the volume was detached, or the node fenced it)"
	}
	return ""
}
