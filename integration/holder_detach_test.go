package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// "The holding node detaches first" (branch i41n): at an allocation's stop
// the agent marks the claim stopping, unmounts it itself (NodeUnpublish,
// NodeUnstage when no other held claim of the node uses the volume), drops
// its held record and reports the allocation complete with the volumes it
// detached. The release entry records node-detached; with a controller
// plugin the release watcher only controller-detaches and frees. These
// tests check, on that path and with real agents, real Raft and the
// hostdir plugin's own call records, that the design's safety properties
// still hold: S1 (one writer), S3 (controller detach only after the node
// detach) and S4 (no controller detach while another live claim on that
// node uses the volume).

// volumeCalls are the plugin calls that attach, mount, unmount or detach a
// volume: the ones whose order the safety properties are about.
var volumeCalls = map[string]bool{
	"ControllerPublishVolume": true, "ControllerUnpublishVolume": true,
	"NodeStageVolume": true, "NodeUnstageVolume": true,
	"NodePublishVolume": true, "NodeUnpublishVolume": true,
}

// callOrder lists the successful attach/mount/unmount/detach calls on the
// volume ext, in the order the plugins finished them, as "Method@node"
// (the node is the request's for controller calls, the plugin's own for
// node calls).
func callOrder(entries []hostdir.AuditEntry, ext string) []string {
	var out []string
	for _, en := range entries {
		if en.Volume == ext && en.Result == "ok" && volumeCalls[en.Method] {
			out = append(out, en.Method+"@"+en.Node)
		}
	}
	return out
}

// releasedClaim is alloc's freed claim of vol, from the volume's record of
// its last freed claims (nil until freed).
func (e *releaseEnv) releasedClaim(t *testing.T, vol, alloc string) *structs.Claim {
	t.Helper()
	v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), vol, structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found *structs.Claim
	for _, c := range v.Released {
		if c.AllocID == alloc {
			found = c
		}
	}
	return found
}

// waitReleased waits until alloc's claim of vol is freed and returns it.
func (e *releaseEnv) waitReleased(t *testing.T, vol, alloc string) *structs.Claim {
	t.Helper()
	var c *structs.Claim
	harness.WaitFor(t, 30*time.Second, func() error {
		if c = e.releasedClaim(t, vol, alloc); c == nil {
			return fmt.Errorf("claim %s/%s exp: freed got: not yet", vol, alloc)
		}
		return nil
	})
	return c
}

// waitRunning waits until the allocation runs, and fails at once if it
// ended instead (a refused controller publish, say).
func (e *releaseEnv) waitRunning(t *testing.T, allocID string) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), allocID, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.Terminal() {
			t.Fatalf("alloc %s exp: running got: %s, final (%s)", allocID, a.ClientStatus, a.ClientDescription)
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("alloc %s exp: running got: %s (%s)", allocID, a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
}

// waitPendingFor waits until allocID is pending with its agent waiting for
// volume vol (its claim refused: another allocation holds the volume).
func (e *releaseEnv) waitPendingFor(t *testing.T, allocID, vol string) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), allocID, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientPending || !strings.Contains(a.ClientDescription, vol) {
			return fmt.Errorf("%s exp: pending, waiting for %s got: %s (%s)", allocID, vol, a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
}

// stepIndex is the Raft index at which c reached state (0: never).
func stepIndex(c *structs.Claim, state structs.ClaimState) uint64 {
	for _, s := range c.Steps {
		if s.State == state {
			return s.Index
		}
	}
	return 0
}

// checkNodeDetachedByHolder asserts that a freed claim went the new way:
// node-detached was recorded by the entry that made it past (the node's
// terminal report), not by a later checkpoint after a servers' NodeDetach;
// with a controller plugin it was freed later, by the watcher's controller
// step.
func checkNodeDetachedByHolder(t *testing.T, c *structs.Claim) {
	t.Helper()
	past, detached, freed := stepIndex(c, structs.ClaimStateUnpublishing), stepIndex(c, structs.ClaimStateNodeDetached), stepIndex(c, structs.ClaimStateFreed)
	if past == 0 || detached != past {
		t.Fatalf("claim %s/%s node-detached exp: in the release entry (index %d) got: at %d (steps %+v): the servers drove the node detach",
			c.VolumeID, c.AllocID, past, detached, c.Steps)
	}
	if freed <= detached {
		t.Fatalf("claim %s/%s freed exp: after node-detached, by the watcher's controller step got: freed at %d, node-detached at %d (steps %+v)",
			c.VolumeID, c.AllocID, freed, detached, c.Steps)
	}
}

// slowUnpublish makes a node plugin's NodeUnpublishVolume take a while, so
// that anything that ran before the node's own unmount had finished (a
// controller detach on a statement made too early, say) shows in the
// plugins' records instead of being hidden by a fast unmount.
func slowUnpublish(p *harness.TestPlugin) {
	p.SetControl(hostdir.Control{Delay: map[string]string{"NodeUnpublishVolume": "700ms"}})
}

// S3 and S1 on the holder's path, with a controller plugin: a writer of a
// single-node-writer volume stops on w1 while a second writer waits on w2.
// The plugins' records show, in this order and nothing else: w1's own
// NodeUnpublish and NodeUnstage (once each: no servers' node detach
// after it), the controller detach from w1, then the controller attach to
// w2 and w2's stage and publish. The claim's steps show node-detached in
// the release entry itself.
func TestHolderDetach_ControllerDetachWaitsForTheHoldersOwnUnmount(t *testing.T) {
	e := newReleaseEnv(t, "w1", "w2")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	e.run(t, "a2", "w2", "v1")
	// a2's claim is refused (one writer) and retried by w2's agent.
	e.waitPendingFor(t, "a2", "v1")
	e.c.WaitForHolderDetach(30 * time.Second)
	slowUnpublish(e.nodes["w1"])

	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, "a2")
	c := e.waitReleased(t, "v1", "a1")
	checkNodeDetachedByHolder(t, c)

	audit := e.auditAll()
	want := []string{
		"ControllerPublishVolume@ext-w1", "NodeStageVolume@ext-w1", "NodePublishVolume@ext-w1",
		"NodeUnpublishVolume@ext-w1", "NodeUnstageVolume@ext-w1", "ControllerUnpublishVolume@ext-w1",
		"ControllerPublishVolume@ext-w2", "NodeStageVolume@ext-w2", "NodePublishVolume@ext-w2",
	}
	if got := callOrder(audit, "ext-v1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("v1's calls exp: %v got: %v", want, got)
	}
	checkDetachOrder(t, audit, nil)
}

// S4 on the holder's path, with shared staging: two writers of a
// multi-node-multi-writer volume on one node share its staging. The first
// to stop unpublishes only its own target; the staging stays, the other
// writer's mount still reads and writes, and the controller leaves the
// node attached (the other live claim needs it). The second to stop
// unpublishes and unstages, and only then is the volume detached from the
// node. Both releases record node-detached in their own entry.
func TestHolderDetach_SharedStagingStaysForTheOtherAllocation(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeMultiNodeMultiWriter)
	e.run(t, "a1", "w1", "v1")
	e.run(t, "a2", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	e.waitAlloc(t, "a2", structs.AllocClientRunning)
	mount1 := mountPath(t, e.clients["w1"], "a1", "v1")
	mount2 := mountPath(t, e.clients["w1"], "a2", "v1")
	if err := os.WriteFile(filepath.Join(mount1, "from-a1"), []byte("a1"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.c.WaitForHolderDetach(30 * time.Second)
	slowUnpublish(e.nodes["w1"])

	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "a1", structs.AllocClientComplete)
	checkNodeDetachedByHolder(t, e.waitReleased(t, "v1", "a1"))

	audit := e.auditAll()
	want := []string{
		"ControllerPublishVolume@ext-w1", "NodeStageVolume@ext-w1", "NodePublishVolume@ext-w1", "NodePublishVolume@ext-w1",
		"NodeUnpublishVolume@ext-w1",
	}
	if got := callOrder(audit, "ext-v1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("v1's calls after a1 stopped exp: %v (a1's unpublish only; staging and attachment stay for a2) got: %v", want, got)
	}
	if n := csiCalls(audit, "NodeUnpublishVolume", "ext-v1", "", "ok", "/per-alloc/a1/"); n != 1 {
		t.Fatalf("NodeUnpublish of a1's target exp: 1 got: %d", n)
	}
	// a2's mount still works, on the same storage: it reads what a1 wrote
	// and writes.
	if b, err := os.ReadFile(filepath.Join(mount2, "from-a1")); err != nil || string(b) != "a1" {
		t.Fatalf("a2's mount after a1's unmount exp: reads a1's file got: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mount2, "from-a2"), []byte("a2"), 0o644); err != nil {
		t.Fatalf("a2's mount after a1's unmount exp: writable got: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mount2, "from-a2")); err != nil || string(b) != "a2" {
		t.Fatalf("a2's mount exp: reads back its write got: %q %v", b, err)
	}
	if c := e.claimOf(t, "v1", "a2"); c == nil || c.State != structs.ClaimStateTaken {
		t.Fatalf("a2's claim exp: live got: %v", c)
	}

	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a2"); err != nil {
		t.Fatal(err)
	}
	checkNodeDetachedByHolder(t, e.waitReleased(t, "v1", "a2"))
	e.waitFreed(t, "v1", 30*time.Second)
	audit = e.auditAll()
	want = append(want, "NodeUnpublishVolume@ext-w1", "NodeUnstageVolume@ext-w1", "ControllerUnpublishVolume@ext-w1")
	if got := callOrder(audit, "ext-v1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("v1's calls after a2 stopped exp: %v got: %v", want, got)
	}
	if n := csiCalls(audit, "NodeUnpublishVolume", "ext-v1", "", "ok", "/per-alloc/a2/"); n != 1 {
		t.Fatalf("NodeUnpublish of a2's target exp: 1 got: %d", n)
	}
	checkDetachOrder(t, audit, nil)
}
