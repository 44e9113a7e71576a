package bench_test

import (
	"testing"
	"time"

	"github.com/claimd/claimd/bench"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// The handoff mode against real parts: a three-server secured cluster, a
// client agent with the hostdir node plugin and a controller. Every
// round times one handoff per volume (the waiter running after its
// holder's stop), and the run leaves nothing behind. No figure is checked.
func TestBench_HandoffOnARealNode(t *testing.T) {
	c, addrs := mustNewCluster(t, harness.Options{})
	root := t.TempDir()
	node := harness.StartPlugin(t, "w1", hostdir.ModeNode, root)
	c.StartClient("w1", addrs, node.Config())
	ctrl := harness.StartPlugin(t, "ctrl", hostdir.ModeController, root)
	c.StartClient("ctrl", addrs, ctrl.Config()).AdmitControllers()
	harness.WaitFor(t, 30*time.Second, func() error {
		p, _, err := mustClient(t, c, addrs...).Plugin(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.NodesHealthy != 1 || p.ControllersHealthy != 1 {
			return errNotYet
		}
		return nil
	})
	cfg := benchConfig(t, c, c.ManagementToken())
	cfg.Addresses, cfg.Mode, cfg.Volumes, cfg.Rounds, cfg.HandoffNode = addrs[:1], bench.ModeHandoff, 3, 2, "w1"
	rs := mustRun(t, cfg)
	if len(rs) != 2 {
		t.Fatalf("exp: 2 rounds got: %d", len(rs))
	}
	for _, r := range rs {
		if r.Ops != 3 || r.Latency.Count != 3 || r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.Max {
			t.Errorf("round exp: 3 handoffs timed got: %+v", r)
		}
	}
	cl := mustClient(t, c, addrs...)
	vols, _, err := cl.Volumes(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
	if err != nil || len(vols) != 0 {
		t.Fatalf("exp: the run's volumes deregistered got: %d %v", len(vols), err)
	}
	allocs, _, err := cl.Allocs(harness.Ctx(t, 10*time.Second), "", structs.QueryOptions{})
	if err != nil || len(allocs) != 0 {
		t.Fatalf("exp: the run's allocations removed got: %d %v", len(allocs), err)
	}
}

var errNotYet = errorString("not ready yet")

type errorString string

func (e errorString) Error() string { return string(e) }
