package client

import (
	"time"

	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
)

// A graceful stop (SIGTERM, systemctl stop) leaves workloads and mounts
// as they are: an upgrade or a restart brings the agent back within the
// lease, and stopping every writer for it would turn each upgrade into an
// outage. The lease file keeps the last renewal's deadline, so if the
// agent is not back in time the fence-policy workloads are stopped by
// what outlives it (claimd exec, claimd keeper) at the fence start, and
// the restarted agent fences whatever is still mounted before it
// registers (startup.go). The warning says when, so an operator who
// stops the agent for longer knows what will happen.

// warnStopWithFenceClaims logs, at a stop, when the fence-policy claims
// held here will be fenced if no agent renews the lease first.
func (a *Agent) warnStopWithFenceClaims() {
	if a.held == nil || a.leaseFile == nil || !a.lease.enabled() {
		return
	}
	claims := a.held.fenceable()
	if len(claims) == 0 {
		return
	}
	fenceAt, deadline := a.leaseFile.deadlines()
	now := leasefile.Now()
	at := time.Now().Add(time.Duration(fenceAt - now))
	allocs := make([]string, 0, len(claims))
	for _, c := range claims {
		allocs = append(allocs, c.AllocID+"/"+c.VolumeID)
	}
	if fenceAt == 0 || fenceAt <= now {
		a.logger.Warn("agent stopping while its node lease is not live: fence-policy workloads must stop now (claimd exec and the keeper stop them), and a restarted agent fences them before it registers",
			"claims", allocs)
		return
	}
	a.logger.Warn("agent stopping with fence-policy volumes mounted: their workloads and mounts stay; unless an agent is back and renews the node lease, they are fenced by claimd exec / claimd keeper at fence_at (and the servers may give the volumes to another node after the lease deadline)",
		"claims", allocs, "fence_at", at.UTC().Format(time.RFC3339Nano),
		"lease_deadline", time.Now().Add(time.Duration(deadline-now)).UTC().Format(time.RFC3339Nano),
		"servers_release_after", structs.LeaseExpiry(a.lease.length))
}
