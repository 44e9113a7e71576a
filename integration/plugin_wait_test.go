package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// waitHostdirHealthy polls, through cl, until plugin "hostdir" has exactly
// nodes healthy node instances and controllers healthy controllers, and
// needs a controller: the agents have registered and the controller was
// admitted.
func waitHostdirHealthy(t *testing.T, cl *api.Client, nodes, controllers int) {
	t.Helper()
	harness.WaitFor(t, applyWait, func() error {
		p, _, err := cl.Plugin(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.NodesHealthy != nodes || p.ControllersHealthy != controllers || !p.ControllerRequired {
			return fmt.Errorf("plugin exp: %d healthy nodes, %d healthy controllers, controller required got: %+v", nodes, controllers, p)
		}
		return nil
	})
}

// registerWithPolicy registers testVolume(id) under the node-lost policy.
func registerWithPolicy(t *testing.T, cl *api.Client, id string, policy structs.NodeLostPolicy) {
	t.Helper()
	v := testVolume(id)
	v.NodeLost = policy
	if _, err := cl.RegisterVolumes(harness.Ctx(t, 30*time.Second), v); err != nil {
		t.Fatal(err)
	}
}
