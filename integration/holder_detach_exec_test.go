package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// lastOK is the time of the last successful call of method on volume ext
// from node (zero: none).
func lastOK(entries []hostdir.AuditEntry, method, ext, node string) time.Time {
	var at time.Time
	for _, en := range entries {
		if en.Method == method && en.Volume == ext && en.Result == "ok" && en.Node == node {
			at = en.Time
		}
	}
	return at
}

// S1 with a real writer on the holder's path: a fence-policy volume's
// workload runs under `claimd exec` on w1 (a real agent process) while a
// second allocation waits for the volume on w2. The allocation on w1
// stops: its agent marks the claim stopping, unmounts it itself and says
// so in its terminal report; exec ends the workload ("stopped") on the
// stopping mark, before the (slow) unmount has finished. The
// volume moves to w2 only after the controller detach from w1, and the
// writers' own records show no overlap: w1 wrote nothing after its node's
// unmount, and w2's first record comes after w1's last. The agent's log
// shows no servers' node detach.
func TestHolderDetach_FenceExecWriterEndsBeforeTheNextHolderWrites(t *testing.T) {
	e := newFxEnv(t)
	x, pid, records := e.startFencedWriter(t)
	e.place(t, "a3", e.clients["w2"].NodeID())
	e.waitPendingFor(t, "a3", "vf")
	e.c.WaitForHolderDetach(30 * time.Second)
	// A slow unmount (2 s) leaves exec's poll (100 ms) time to see the
	// claim marked stopping and end the workload while the unmount runs:
	// the agent must mark it before it unmounts. With a fast unmount the
	// unmount usually wins (the agent does not wait for exec) and the
	// writer's next write fails instead, as it cannot write through a
	// mount that is gone; a real mount a workload holds open refuses the
	// unmount (EBUSY) until exec has ended it.
	e.nodes["w1"].SetControl(hostdir.Control{Delay: map[string]string{"NodeUnpublishVolume": "2s"}})
	var execEnded time.Time
	endSeen := make(chan struct{})
	go func() { <-x.done; execEnded = time.Now(); close(endSeen) }()

	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	if code := x.waitExit(t, 30*time.Second); code != 4 || !strings.Contains(x.out.String(), "stopped: the agent released the claim") {
		t.Fatalf("claimd exec after alloc stop exp: exit 4, stopped got: %d\n%s", code, x.out.String())
	}
	<-endSeen
	if !strings.Contains(x.out.String(), fmt.Sprintf("ending allocation a1's command (pid %d)", pid)) {
		t.Fatalf("claimd exec exp: ended the workload on the claim's stopping mark got: \n%s", x.out.String())
	}
	if fxAlive(pid) {
		t.Fatalf("writer pid %d exp: ended with claimd exec got: alive", pid)
	}
	harness.WaitFor(t, 40*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a3", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.Terminal() {
			t.Fatalf("a3 on w2 exp: running got: %s, final (%s)", a.ClientStatus, a.ClientDescription)
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("a3 on w2 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	checkNodeDetachedByHolder(t, e.waitReleased(t, "vf", "a1"))

	mount2 := mountPath(t, e.clients["w2"], "a3", "vf")
	startWriter(t, "w2", mount2, "")
	fxWaitRecords(t, filepath.Join(mount2, "records"), "w2", 3)

	audit := e.auditAll()
	want := []string{
		"ControllerPublishVolume@ext-w1", "NodeStageVolume@ext-w1", "NodePublishVolume@ext-w1",
		"NodeUnpublishVolume@ext-w1", "NodeUnstageVolume@ext-w1", "ControllerUnpublishVolume@ext-w1",
		"ControllerPublishVolume@ext-w2", "NodeStageVolume@ext-w2", "NodePublishVolume@ext-w2",
	}
	if got := callOrder(audit, "ext-vf"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("vf's calls exp: %v got: %v", want, got)
	}
	unmounted := lastOK(audit, "NodeUnpublishVolume", "ext-vf", "ext-w1")
	detached := lastOK(audit, "ControllerUnpublishVolume", "ext-vf", "ext-w1")
	var lastW1, firstW2 time.Time
	for _, r := range readRecords(t, records) {
		switch {
		case r.who == "w1":
			if !firstW2.IsZero() {
				t.Fatalf("single writer exp: no w1 record after w2's first got: w1 at %s after w2 at %s",
					r.at.Format(time.RFC3339Nano), firstW2.Format(time.RFC3339Nano))
			}
			lastW1 = r.at
		case r.who == "w2" && firstW2.IsZero():
			firstW2 = r.at
		}
	}
	if !execEnded.Before(unmounted) {
		t.Fatalf("workload under claimd exec exp: ended before w1's own NodeUnpublish finished (%s) got: ended %s",
			unmounted.Format(time.RFC3339Nano), execEnded.Format(time.RFC3339Nano))
	}
	if !lastW1.Before(unmounted) {
		t.Fatalf("w1's last record exp: before w1's NodeUnpublish (%s) got: %s",
			unmounted.Format(time.RFC3339Nano), lastW1.Format(time.RFC3339Nano))
	}
	if !detached.Before(firstW2) {
		t.Fatalf("w2's first record exp: after the controller detach from w1 (%s) got: %s",
			detached.Format(time.RFC3339Nano), firstW2.Format(time.RFC3339Nano))
	}
	// What the agent did: its own unmount, no servers' node detach (that
	// path logs "node detached volume"), no failed own unmount.
	out := e.agent.Output()
	if strings.Contains(out, "node detached volume") || strings.Contains(out, "own node detach failed") {
		t.Fatalf("w1's agent exp: only its own node detach got: a servers' node detach or a failed own one in its log")
	}
	t.Logf("claimd exec ended %s and w1's last record was %s before w1's NodeUnpublish finished; w2's first record %s after the controller detach",
		unmounted.Sub(execEnded).Round(time.Millisecond), unmounted.Sub(lastW1).Round(time.Millisecond), firstW2.Sub(detached).Round(time.Millisecond))
}
