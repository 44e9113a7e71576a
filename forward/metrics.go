package forward

import (
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/structs"
)

// countForward counts one call forwarded to the leader by method and
// result ("ok" or the error's code) and times it by method.
func countForward(method string, start time.Time, err error) {
	result := structs.CodeOf(err)
	if result == "" {
		result = "ok"
	}
	metrics.MeasureSinceWithLabels([]string{"forward", "latency"}, start, []metrics.Label{{Name: "method", Value: method}})
	metrics.IncrCounterWithLabels([]string{"forward", "calls"}, 1,
		[]metrics.Label{{Name: "method", Value: method}, {Name: "result", Value: result}})
}
