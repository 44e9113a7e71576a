package endpoints

import (
	metrics "github.com/hashicorp/go-metrics/compat"
)

// countHolderDetached counts claims whose release entry recorded the
// holding node's own node detach (decision 61): the servers drove no node
// detach for them (claimd.release.holder_detached, on the leader). With
// claimd.release.attempts{step="node_detach"} it shows which path releases
// take: a cluster whose agents and servers all run a build with the
// statement sends nearly all of them this way.
func countHolderDetached(n int) {
	metrics.IncrCounter([]string{"release", "holder_detached"}, float32(n))
}
