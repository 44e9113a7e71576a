package client

import (
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/leasefile"
)

// A restarted agent fences before anything else (issue 39). It cannot
// know how long it was away, nor whether the servers released its
// fence-policy claims meanwhile and gave the volumes to another node. The
// one proof it can have is the lease file its predecessor published: on
// this boot, for this node, with the fence start still ahead, the lease is
// live on the servers' side too (the file's deadline counts from a
// heartbeat's send, the servers' from its arrival). Then it carries on
// with that deadline. Otherwise every fence-policy claim it holds is
// fenced (the fence command, then the unmount) before the node registers
// and before any allocation runs: "ready" means the start-up fence is
// over (fence_loop.go, run).

// startupLease is what the agent concluded about its predecessor's lease.
type startupLease struct {
	// live: the lease is shown live; remaining is how long until the
	// predecessor's deadline, in real time.
	live      bool
	remaining time.Duration
	// why says why the lease is not shown live (for the log).
	why string
}

// judgeStartupLease decides from the lease file read at start (f nil:
// unreadable or missing, with readErr), at CLOCK_BOOTTIME now on boot
// bootID. The fence start is the test, as for claimd exec and the keeper
// (leasefile.Judge): within the fence budget the fence is due already.
func judgeStartupLease(f *leasefile.File, readErr error, nodeID, bootID string, now int64) startupLease {
	switch {
	case f == nil:
		return startupLease{why: fmt.Sprintf("no lease file to show it live (%v)", readErr)}
	case f.BootID == "" || f.BootID != bootID:
		return startupLease{why: "the lease file is from another boot"}
	case f.NodeID != nodeID:
		return startupLease{why: fmt.Sprintf("the lease file is node %q's, not this node's", f.NodeID)}
	case f.FenceAt == 0 || f.Deadline == 0:
		return startupLease{why: "the lease was never renewed"}
	case now >= f.FenceAt:
		return startupLease{why: fmt.Sprintf("its fence start passed %s ago", time.Duration(now-f.FenceAt).Round(time.Millisecond))}
	}
	return startupLease{live: true, remaining: time.Duration(f.Deadline - now)}
}

// readStartupLease reads and judges the lease file in dataDir.
func readStartupLease(dataDir, nodeID string) startupLease {
	f, err := leasefile.Read(leasefile.Path(dataDir))
	if err != nil {
		f = nil
	}
	return judgeStartupLease(f, err, nodeID, leasefile.BootID(), leasefile.Now())
}
