package client

import (
	metrics "github.com/hashicorp/go-metrics/compat"
)

// countOwnDetach counts one node detach this agent did itself at an
// allocation's stop (decision 61), by plugin and result: "ok" (said in the
// terminal report, so the servers skip their own node detach) or "failed"
// (left to the servers' node detach, which retries). A rising "failed"
// count means stops wait for the servers' path: a busy mount or an
// unhealthy plugin.
func countOwnDetach(pluginID string, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	metrics.IncrCounterWithLabels([]string{"client", "own_node_detach"}, 1,
		[]metrics.Label{{Name: "plugin", Value: pluginID}, {Name: "result", Value: result}})
}
