package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// cliEnv is what an operator's shell holds for the CLI against e's
// cluster: its address, CA, a cli certificate and the management token.
func (e *releaseEnv) cliEnv(t *testing.T) []string {
	t.Helper()
	env := []string{"CLAIMD_ADDR=" + e.c.Servers[0].Addr, "CLAIMD_TOKEN=" + e.c.ManagementToken()}
	if pki := e.c.PKI(); pki != nil {
		env = append(env, "CLAIMD_CACERT="+pki.CAFile, "CLAIMD_CLIENT_CERT="+pki.CertFile[tlsutil.RoleCLI],
			"CLAIMD_CLIENT_KEY="+pki.KeyFile[tlsutil.RoleCLI])
	}
	return env
}

// Drain as one ordered step (issue 26): a dry run changes nothing; the
// drain makes the node ineligible, stops its allocations and frees every
// claim, node detach before controller detach, through a NodeUnpublish
// that fails once; when it reports done the node's plugin is no longer
// needed (every node detach on it has happened), so stopping it last
// loses nothing. Another node's claim is untouched.
func TestNodeDrain_FreesEveryClaimInOrderAndPluginsLast(t *testing.T) {
	e := newReleaseEnv(t, "w1", "w2")
	for _, v := range []string{"v1", "v2", "v3", "v4"} {
		e.register(t, v, structs.AccessModeSingleNodeWriter)
	}
	e.run(t, "a1", "w1", "v1")
	e.run(t, "a2", "w1", "v2")
	e.run(t, "a3", "w1", "v3")
	e.run(t, "b1", "w2", "v4")
	for _, a := range []string{"a1", "a2", "a3", "b1"} {
		e.waitAlloc(t, a, structs.AllocClientRunning)
	}
	w1 := e.clients["w1"].NodeID()
	cli := func(args ...string) harness.CLIResult { return harness.RunCLIEnv(t, e.cliEnv(t), args...) }

	// The dry run: the plan, and not one change.
	state := func() string {
		st := e.c.Leader().Server().State()
		n, _ := st.NodeByID(nil, w1)
		return fmt.Sprintf("allocs@%d volumes@%d evals@%d eligibility=%q", st.TableIndex(fsm.TableAllocs),
			st.TableIndex(fsm.TableVolumes), st.TableIndex(fsm.TableEvals), n.Eligibility)
	}
	before := state()
	dry := cli("node", "drain", "-dry-run", w1)
	if dry.Code != 0 {
		t.Fatalf("node drain -dry-run exp: exit 0 got: %d\n%s%s", dry.Code, dry.Stdout, dry.Stderr)
	}
	for _, want := range []string{"Dry run: a drain of node " + w1, "3 allocations stopped, 3 claims released",
		"node detach (NodeUnpublish, NodeUnstage) on " + w1, "then controller detach (ControllerUnpublish)",
		"must keep serving until the drain is done: hostdir", "Nothing blocks it now"} {
		if !strings.Contains(dry.Stdout, want) {
			t.Fatalf("dry run exp: %q got:\n%s", want, dry.Stdout)
		}
	}
	if after := state(); after != before {
		t.Fatalf("dry run exp: nothing changed got: %s -> %s", before, after)
	}
	for _, a := range []string{"a1", "a2", "a3"} {
		e.waitAlloc(t, a, structs.AllocClientRunning)
	}

	// The drain, with the node's first NodeUnpublish failing.
	e.nodes["w1"].SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1}})
	res := cli("node", "drain", "-deadline", "90s", w1)
	if res.Code != 0 {
		t.Fatalf("node drain exp: exit 0 got: %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "Drain complete: 3 claims freed; node plugins on "+w1+" (hostdir) may now be stopped") {
		t.Fatalf("node drain exp: done, plugins may stop got:\n%s", res.Stdout)
	}
	// Done means done: every claim on w1 freed, in order, from the
	// plugins' own records; the failed NodeUnpublish was retried.
	for _, v := range []string{"v1", "v2", "v3"} {
		e.waitFreed(t, v, 5*time.Second)
	}
	audit := e.auditAll()
	checkDetachOrder(t, audit, nil)
	failed := 0
	for _, en := range e.nodes["w1"].Audit() {
		if en.Method == "NodeUnpublishVolume" && en.Result != "ok" {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("w1 NodeUnpublish exp: one injected failure got: %d", failed)
	}
	for _, v := range []string{"ext-v1", "ext-v2", "ext-v3"} {
		if countCalls(e.controller.Audit(), "ControllerUnpublishVolume", v, "ok") == 0 {
			t.Fatalf("%s exp: controller-detached got: none", v)
		}
	}
	// The plugins go last: stopping w1's plugin now changes nothing for
	// the drain, and a later look still finds it done.
	e.nodes["w1"].Stop()
	st, _, err := e.api.NodeDrainStatus(harness.Ctx(t, 10*time.Second), w1, structs.QueryOptions{})
	if err != nil || !st.Done || len(st.ClaimsLeft) != 0 {
		t.Fatalf("drain status after the plugin stopped exp: done got: %+v %v", st, err)
	}
	// Ineligible: a new claim on w1 is refused; w2 kept its claim.
	e.run(t, "c1", "w1", "v1")
	_, err = e.api.Claim(harness.Ctx(t, 10*time.Second), &structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "c1", NodeID: w1, Mode: structs.ClaimModeWrite})
	if err == nil || !strings.Contains(err.Error(), "ineligible") {
		t.Fatalf("claim on a drained node exp: refused as ineligible got: %v", err)
	}
	if c := e.claimOf(t, "v4", "b1"); c == nil || c.State != structs.ClaimStateTaken {
		t.Fatalf("w2's claim exp: untouched got: %+v", c)
	}
	if r := cli("node", "eligibility", "-enable", w1); r.Code != 0 || !strings.Contains(r.Stdout, "eligible for new claims") {
		t.Fatalf("node eligibility -enable exp: ok got: %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), w1, structs.QueryOptions{})
	if err != nil || n.Eligibility == structs.NodeIneligible {
		t.Fatalf("node exp: eligible again got: %+v %v", n, err)
	}
}

// A drain that cannot finish by its deadline exits 2 and says what is
// left and why.
func TestNodeDrain_DeadlineReportsWhatIsLeft(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	w1 := e.clients["w1"].NodeID()
	e.nodes["w1"].SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1000}})
	res := harness.RunCLIEnv(t, e.cliEnv(t), "node", "drain", "-deadline", "3s", w1)
	if res.Code != 2 {
		t.Fatalf("node drain past its deadline exp: exit 2 got: %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"the deadline (3s) passed with work left on " + w1, "volume v1 (alloc a1): claim"} {
		if !strings.Contains(res.Stderr, want) {
			t.Fatalf("node drain past its deadline exp: %q got:\n%s", want, res.Stderr)
		}
	}
	if n := countCalls(e.controller.Audit(), "ControllerUnpublishVolume", "ext-v1", ""); n != 0 {
		t.Fatalf("controller detach while the node detach fails exp: none got: %d", n)
	}
	// Bad input is refused naming the field, and changes nothing.
	_, err := e.api.DrainNode(harness.Ctx(t, 10*time.Second), "no-such-node", true)
	if !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("drain of an unknown node exp: not_found got: %v", err)
	}
	_, err = e.api.DrainNode(harness.Ctx(t, 10*time.Second), "../x", false)
	if err == nil || !strings.Contains(err.Error(), "node_id") {
		t.Fatalf("drain of a bad node ID exp: invalid node_id got: %v", err)
	}
}
