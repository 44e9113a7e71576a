package integration

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// A backup restored into a running cluster makes the record older than
// the node (issue 40): in the backup a0 ran holding v1 and a1 waited for
// it; since then a0 stopped, a1 took v1 and runs, and a2 was placed with
// v2. After the restore the agent re-reports what it holds: a0's end is
// reported again (so its resurrected claim is released), a1's claim is
// taken again and a1 reported running, and a2, which the record does not
// know, has its volume stopped and unmounted. The record ends as the node
// is: a1 holds v1, nobody holds v2.
func TestRestore_AgentsReReportWhatTheyHold(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.register(t, "v2", structs.AccessModeSingleNodeWriter)
	e.run(t, "a0", "w1", "v1")
	e.waitAlloc(t, "a0", structs.AllocClientRunning)
	e.run(t, "a1", "w1", "v1") // waits: v1 is single-node-writer and a0 holds it
	var backup bytes.Buffer
	if _, err := e.api.SnapshotSave(harness.Ctx(t, 30*time.Second), &backup, api.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a0"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	e.run(t, "a2", "w1", "v2")
	e.waitAlloc(t, "a2", structs.AllocClientRunning)
	v2Unpublishes := countCalls(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-v2", "ok")

	if err := e.api.SnapshotRestore(harness.Ctx(t, 30*time.Second), &backup, api.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 90*time.Second, func() error {
		ctx := harness.Ctx(t, 10*time.Second)
		a0, _, err := e.api.Alloc(ctx, "a0", structs.QueryOptions{})
		if err != nil || a0 == nil || !a0.Terminal() {
			return fmt.Errorf("a0 exp: its end reported again got: %+v %v", a0, err)
		}
		a1, _, err := e.api.Alloc(ctx, "a1", structs.QueryOptions{})
		if err != nil || a1 == nil || a1.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("a1 exp: running again got: %+v %v", a1, err)
		}
		v1, _, err := e.api.Volume(ctx, "v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if c := v1.Claim("a1"); c == nil || c.State != structs.ClaimStateTaken || len(v1.PastClaims) > 0 || v1.Claim("a0") != nil {
			return fmt.Errorf("v1 exp: a1's claim taken again, a0's released got: write %v past %v", v1.WriteClaims, v1.PastClaims)
		}
		if n := countCalls(e.nodes["w1"].Audit(), "NodeUnpublishVolume", "ext-v2", "ok"); n <= v2Unpublishes {
			return fmt.Errorf("a2's v2 (unknown to the restored record) exp: unmounted on w1 got: %d unpublishes", n)
		}
		return nil
	})
	// a1's mount was never taken away by the re-report.
	if a1, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{}); err != nil || a1.ClientStatus != structs.AllocClientRunning {
		t.Fatalf("a1 exp: still running got: %+v %v", a1, err)
	}
}
