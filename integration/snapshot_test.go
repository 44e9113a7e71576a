package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/snapshot"
	"github.com/claimd/claimd/snapshot/inspect"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Issue 17 item 5: backup and restore. A snapshot is saved through a
// follower of a secured cluster while writes go on, restored into a fresh
// cluster through one of its followers, and every server of the new
// cluster then holds exactly the archive's state (its digest is the
// archive's state checksum). Damaged archives and limited tokens are
// refused before anything changes. The release watcher of the new cluster
// then finishes the releases that were pending in the archive, once the
// node comes back, and a node that never comes back is marked down.

func serverAddrs(c *harness.Cluster) []string {
	var out []string
	for _, s := range c.Servers {
		out = append(out, s.Addr)
	}
	return out
}

// digests reads every server's state digest with token.
func digests(t *testing.T, c *harness.Cluster, token string) (map[string]string, error) {
	t.Helper()
	out := map[string]string{}
	for _, s := range c.Servers {
		d, err := s.ClientWithToken(token).StateDigest(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		out[s.Name] = d.SHA256
	}
	return out, nil
}

// operatorReadToken makes a token that may read everything an operator
// reads, and nothing more.
func operatorReadToken(t *testing.T, cl *api.Client) string {
	t.Helper()
	ctx := harness.Ctx(t, 30*time.Second)
	if _, err := cl.ACLPolicyApply(ctx, "operator-read", "", `operator { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	tok, err := cl.ACLTokenCreate(ctx, "operator-read", structs.ACLTokenClient, []string{"operator-read"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

func aclDenied(c *harness.Cluster) uint64 {
	var n uint64
	for _, s := range c.Servers {
		if srv := s.Server(); srv != nil {
			n += srv.Security().ACLDenied.Load()
		}
	}
	return n
}

func TestSnapshot_SaveUnderLoadRestoreIntoFreshCluster(t *testing.T) {
	ctx := harness.Ctx(t, 5*time.Minute)

	// Cluster A: a client agent w1 running the built-in plugin (node and
	// controller), a node w2 with a node plugin, volumes claimed by
	// running allocations, and releases held pending by a failing plugin.
	// Its agents give their own unmount ownDetachWindow: w1's plugin
	// fails every NodeUnpublish, so it can only fail.
	a := harness.NewCluster(t, 3, harness.Options{ConfigureClient: shortOwnDetach})
	a.StartAll()
	a.WaitForLeader(electionWait)
	root := filepath.Join(t.TempDir(), "storage")
	plug1 := harness.StartPlugin(t, "w1", hostdir.ModeMonolith, root)
	plug2 := harness.StartPlugin(t, "w2", hostdir.ModeNode, root)
	w1 := a.StartClient("w1", serverAddrs(a), plug1.Config())
	w1.AdmitControllers()
	w2 := a.StartClient("w2", serverAddrs(a), plug2.Config())
	aAPI := a.Servers[0].Client()
	waitHostdirHealthy(t, aAPI, 2, 1)
	plug1.SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1 << 30}})
	node1, node2 := w1.NodeID(), w2.NodeID()

	const vols, stopped = 12, 6
	var toRegister []*structs.Volume
	var allocs []*structs.Alloc
	for i := range vols {
		id := fmt.Sprintf("v%02d", i)
		toRegister = append(toRegister, testVolume(id))
		allocs = append(allocs, &structs.Alloc{ID: fmt.Sprintf("a%02d", i), NodeID: node1,
			Volumes: []*structs.AllocVolumeRequest{{VolumeID: id}}})
	}
	if _, err := aAPI.RegisterVolumes(ctx, toRegister...); err != nil {
		t.Fatal(err)
	}
	if _, err := aAPI.PlaceAllocs(ctx, allocs...); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		list, _, err := aAPI.Allocs(harness.Ctx(t, 10*time.Second), node1, structs.QueryOptions{})
		if err != nil {
			return err
		}
		for _, al := range list {
			if al.ClientStatus != structs.AllocClientRunning {
				return fmt.Errorf("alloc %s exp: running got: %s (%s)", al.ID, al.ClientStatus, al.ClientDescription)
			}
		}
		return nil
	})
	var stopIDs []string
	for i := range stopped {
		stopIDs = append(stopIDs, allocs[i].ID)
	}
	if _, err := aAPI.StopAllocs(ctx, stopIDs...); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		evals, _, err := aAPI.Evals(harness.Ctx(t, 10*time.Second), structs.EvalStatusPending, "", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(evals) != stopped {
			return fmt.Errorf("pending evals exp: %d (releases held by the plugin) got: %d", stopped, len(evals))
		}
		return nil
	})

	// Writes go on while the snapshot is saved through a follower.
	var load sync.WaitGroup
	var wrote atomic.Int64
	stopLoad := make(chan struct{})
	loadErr := make(chan error, 1)
	load.Add(1)
	go func() {
		defer load.Done()
		cl := a.Servers[2].Client()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			id := fmt.Sprintf("load%03d", i)
			if _, err := cl.RegisterVolumes(ctx, testVolume(id)); err != nil {
				loadErr <- err
				return
			}
			if _, err := cl.PlaceAllocs(ctx, &structs.Alloc{ID: "la" + id[4:], NodeID: node1,
				Volumes: []*structs.AllocVolumeRequest{{VolumeID: id}}}); err != nil {
				loadErr <- err
				return
			}
			wrote.Add(1)
		}
	}()
	harness.WaitFor(t, 30*time.Second, func() error {
		if n := wrote.Load(); n < 3 {
			return fmt.Errorf("load writes exp: >= 3 before the save got: %d", n)
		}
		return nil
	})
	follower := a.Followers()[0]
	var archive bytes.Buffer
	meta, err := follower.Client().SnapshotSave(ctx, &archive, api.SnapshotOptions{})
	if err != nil {
		t.Fatalf("save through follower %s exp: no error got: %v", follower.Name, err)
	}
	before := wrote.Load()
	harness.WaitFor(t, 30*time.Second, func() error {
		if n := wrote.Load(); n < before+3 {
			return fmt.Errorf("load writes exp: going on after the save got: %d then %d", before, n)
		}
		return nil
	})
	close(stopLoad)
	load.Wait()
	select {
	case err := <-loadErr:
		t.Fatalf("load exp: no error got: %v", err)
	default:
	}
	w1.Stop() // comes back later, in the new cluster
	w2.Stop() // never comes back

	// A stale save is the contacted server's own state.
	stale, err := follower.Client().SnapshotSave(ctx, io.Discard, api.SnapshotOptions{AllowStale: true})
	if err != nil || stale.Server != follower.Name || stale.Index < meta.Index {
		t.Fatalf("stale save through %s exp: its own state, index >= %d got: %+v %v", follower.Name, meta.Index, stale, err)
	}

	insp, err := inspect.Archive(bytes.NewReader(archive.Bytes()))
	if err != nil {
		t.Fatalf("inspect of the saved archive exp: no error got: %v", err)
	}
	if insp.Meta != *meta || meta.Index == 0 || meta.Term == 0 || meta.Format != snapshot.FormatVersion {
		t.Fatalf("archive meta exp: %+v with an index and a term got: %+v", *meta, insp.Meta)
	}
	if insp.Tables["volumes"] < vols+3 || insp.Tables["nodes"] != 2 || insp.Tables["evals"] < stopped ||
		insp.Tables["acl_tokens"] < 2 || insp.Tables["allocs"] < vols+3 {
		t.Fatalf("archive tables exp: >= %d volumes and allocs, 2 nodes, >= %d evals, the tokens got: %v", vols+3, stopped, insp.Tables)
	}
	t.Logf("saved through %s: index %d, term %d, by %s; %d state bytes; tables %v",
		follower.Name, meta.Index, meta.Term, meta.Server, insp.StateSize, insp.Tables)

	// A token that may read the operator's views may not save: the
	// archive holds every secret.
	reader := operatorReadToken(t, aAPI)
	deniedBefore := aclDenied(a)
	if _, err := follower.ClientWithToken(reader).SnapshotSave(ctx, &bytes.Buffer{}, api.SnapshotOptions{}); !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("save with an operator:read token exp: permission_denied got: %v", err)
	}
	if got := aclDenied(a); got != deniedBefore+1 {
		t.Fatalf("ACL denials exp: %d got: %d", deniedBefore+1, got)
	}

	// Cluster B, fresh, with a state of its own. Its heartbeat TTL leaves
	// time to compare digests and bring w1 back before the archive's nodes,
	// which no agent heartbeats for yet, are marked down (TTL + TTL/2 after
	// the restore: 6 s; both took under 0.1 s when measured). The test
	// ends by waiting for w2 to be marked down, so a longer TTL only
	// lengthens that wait (10 s made it 15 s).
	b := harness.NewCluster(t, 3, harness.Options{Configure: func(c *server.Config) { c.HeartbeatTTL = 4 * time.Second }})
	b.StartAll()
	b.WaitForLeader(electionWait)
	bToken := b.ManagementToken()
	bAPI := b.Servers[0].Client()
	if _, err := bAPI.RegisterVolumes(ctx, testVolume("b-only")); err != nil {
		t.Fatal(err)
	}
	bReader := operatorReadToken(t, bAPI)
	reg, err := bAPI.RegisterVolumes(ctx, testVolume("b-last"))
	if err != nil {
		t.Fatal(err)
	}
	b.WaitForApplied(reg.Index, applyWait)
	bBefore, err := digests(t, b, bToken)
	if err != nil {
		t.Fatal(err)
	}
	bFollower := b.Followers()[0]

	// Refused before anything changes: a corrupt byte, a cut, another
	// format, a limited token.
	corrupted := bytes.Clone(archive.Bytes())
	corrupted[len(corrupted)/2] ^= 0x01
	err = bFollower.Client().SnapshotRestore(ctx, bytes.NewReader(corrupted), api.SnapshotOptions{})
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "nothing was changed") ||
		!strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("restore of an archive with a flipped bit exp: invalid, corrupt, nothing changed got: %v", err)
	}
	err = bFollower.Client().SnapshotRestore(ctx, bytes.NewReader(archive.Bytes()[:archive.Len()*3/4]), api.SnapshotOptions{})
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("restore of a truncated archive exp: invalid, truncated got: %v", err)
	}
	var stateBytes bytes.Buffer
	if _, err := snapshot.Read(bytes.NewReader(archive.Bytes()), &stateBytes); err != nil {
		t.Fatal(err)
	}
	future := insp.Meta
	future.Format = snapshot.FormatVersion + 1
	var futureArchive bytes.Buffer
	if _, err := snapshot.Write(&futureArchive, future, bytes.NewReader(stateBytes.Bytes()), int64(stateBytes.Len())); err != nil {
		t.Fatal(err)
	}
	err = bFollower.Client().SnapshotRestore(ctx, &futureArchive, api.SnapshotOptions{})
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "format 2") {
		t.Fatalf("restore of a format 2 archive exp: invalid, naming the format got: %v", err)
	}
	deniedBefore = aclDenied(b)
	err = bFollower.ClientWithToken(bReader).SnapshotRestore(ctx, bytes.NewReader(archive.Bytes()), api.SnapshotOptions{})
	if !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("restore with an operator:read token exp: permission_denied got: %v", err)
	}
	if got := aclDenied(b); got != deniedBefore+1 {
		t.Fatalf("ACL denials exp: %d got: %d", deniedBefore+1, got)
	}
	bAfter, err := digests(t, b, bToken)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range bBefore {
		if bAfter[name] != d {
			t.Fatalf("%s digest after refused restores exp: %s (unchanged) got: %s", name, d, bAfter[name])
		}
	}

	// The restore, through a follower of B.
	lastBefore := b.Leader().Server().Raft().LastIndex()
	if err := bFollower.Client().SnapshotRestore(ctx, bytes.NewReader(archive.Bytes()), api.SnapshotOptions{}); err != nil {
		t.Fatalf("restore through follower %s exp: no error got: %v", bFollower.Name, err)
	}
	// The state is the archive's on every server, ACL tokens included: A's
	// management token works on B, B's own no longer does.
	aToken := a.ManagementToken()
	harness.WaitFor(t, 30*time.Second, func() error {
		got, err := digests(t, b, aToken)
		if err != nil {
			return err
		}
		for name, d := range got {
			if d != insp.StateSHA256 {
				return fmt.Errorf("%s digest exp: %s (the archive's state) got: %s", name, insp.StateSHA256, d)
			}
		}
		return nil
	})
	if _, err := b.Servers[1].ClientWithToken(bToken).StateDigest(ctx); !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("B's own management token after the restore exp: permission_denied got: %v", err)
	}
	bNew := b.Servers[0].ClientWithToken(aToken)
	if _, _, err := bNew.Volume(ctx, "b-only", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("B's own volume after the restore exp: not_found got: %v", err)
	}
	leader := b.WaitForLeader(electionWait)
	if last := leader.Server().Raft().LastIndex(); last <= max(meta.Index, lastBefore) {
		t.Fatalf("B's raft index after the restore exp: > %d got: %d", max(meta.Index, lastBefore), last)
	}

	// w1 comes back, to B: it re-registers with its own secret (restored
	// with the state), and the leader's watcher finishes the releases that
	// were pending in the archive.
	plug1.SetControl(hostdir.Control{})
	agent, err := client.New(client.Config{
		Servers: serverAddrs(b), DataDir: w1.DataDir, NodeName: "w1", Plugins: []csi.PluginConfig{plug1.Config()},
		ProbeInterval: 200 * time.Millisecond, Dialer: b.Net.Dialer("w1"),
		TLS:    b.PKI().Configurator(t, tlsutil.RoleClient),
		Logger: hclog.New(&hclog.LoggerOptions{Name: "client-w1-on-b", Level: hclog.Warn, Output: testOutput{t}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Shutdown)
	if agent.NodeID() != node1 {
		t.Fatalf("w1's node ID on B exp: %s got: %s", node1, agent.NodeID())
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		c := harness.Ctx(t, 10*time.Second)
		evals, _, err := bNew.Evals(c, structs.EvalStatusPending, "", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(evals) != 0 {
			return fmt.Errorf("pending evals on B exp: 0 (released) got: %d", len(evals))
		}
		for _, id := range stopIDs {
			v, _, err := bNew.Volume(c, "v"+id[1:], structs.QueryOptions{})
			if err != nil {
				return err
			}
			if len(v.PastClaims)+len(v.WriteClaims) != 0 {
				return fmt.Errorf("volume %s claims exp: none got: past %v write %v", v.ID, v.PastClaims, v.WriteClaims)
			}
		}
		return nil
	})
	// w2 never comes back: the leader gave it a heartbeat timer at the
	// restore, and it is marked down.
	harness.WaitFor(t, 60*time.Second, func() error {
		n, _, err := bNew.Node(harness.Ctx(t, 10*time.Second), node2, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.Status != structs.NodeStatusDown {
			return fmt.Errorf("node w2 exp: down (no heartbeat since the restore) got: %s", n.Status)
		}
		return nil
	})
}

// testOutput writes a log to the test's output.
type testOutput struct{ t *testing.T }

func (w testOutput) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // the test may have finished
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// The CLI saves, inspects and restores as an operator would, with the
// real binary. Restoring an earlier state of the same cluster takes it
// back: later writes are gone, and a release that was pending in the
// archive (and had finished since) is pending again and released again,
// although its eval's index is below what the watcher had seen.
func TestSnapshot_CLIRestoresAnEarlierStateOfTheSameCluster(t *testing.T) {
	ctx := harness.Ctx(t, 3*time.Minute)
	// w1's plugin fails every NodeUnpublish: its own unmount at the stop
	// can only fail, and gets ownDetachWindow.
	c := harness.NewCluster(t, 3, harness.Options{ConfigureClient: shortOwnDetach})
	c.StartAll()
	c.WaitForLeader(electionWait)
	plug := harness.StartPlugin(t, "w1", hostdir.ModeMonolith, filepath.Join(t.TempDir(), "storage"))
	w1 := c.StartClient("w1", serverAddrs(c), plug.Config())
	w1.AdmitControllers()
	cl := c.Servers[0].Client()
	plug.SetControl(hostdir.Control{Fail: map[string]int{"NodeUnpublishVolume": 1 << 30}})
	if _, err := cl.RegisterVolumes(ctx, testVolume("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PlaceAllocs(ctx, &structs.Alloc{ID: "a1", NodeID: w1.NodeID(),
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: "v1"}}}); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(want structs.AllocClientStatus) {
		t.Helper()
		harness.WaitFor(t, 60*time.Second, func() error {
			al, _, err := cl.Alloc(harness.Ctx(t, 10*time.Second), "a1", structs.QueryOptions{})
			if err != nil {
				return err
			}
			if al.ClientStatus != want {
				return fmt.Errorf("alloc a1 exp: %s got: %s", want, al.ClientStatus)
			}
			return nil
		})
	}
	waitStatus(structs.AllocClientRunning)
	if _, err := cl.StopAllocs(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	waitStatus(structs.AllocClientComplete)
	pending := func() int {
		t.Helper()
		evals, _, err := cl.Evals(harness.Ctx(t, 10*time.Second), structs.EvalStatusPending, "v1", structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(evals)
	}
	if n := pending(); n != 1 {
		t.Fatalf("pending evals of v1 exp: 1 got: %d", n)
	}

	pki := c.PKI()
	follower := c.Followers()[0]
	tlsFlags := []string{"-address", follower.Addr, "-ca-cert", pki.CAFile,
		"-client-cert", pki.CertFile[tlsutil.RoleCLI], "-client-key", pki.KeyFile[tlsutil.RoleCLI]}
	cli := func(token string, args ...string) harness.CLIResult {
		return harness.RunCLI(t, append(append(args, tlsFlags...), "-token", token)...)
	}
	file := filepath.Join(t.TempDir(), "backup.snap")
	r := cli(c.ManagementToken(), "operator", "snapshot", "save")
	if r.Code == 0 {
		t.Fatalf("save without FILE exp: usage error got: %+v", r)
	}
	args := append([]string{"operator", "snapshot", "save"}, append(tlsFlags, "-token", c.ManagementToken(), file)...)
	if r := harness.RunCLI(t, args...); r.Code != 0 || !strings.Contains(r.Stdout, "Saved snapshot to "+file) {
		t.Fatalf("snapshot save exp: saved got: %+v", r)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("archive file exp: mode 0600 got: %v %v", fi, err)
	}

	// inspect works offline, on the file alone.
	r = harness.RunCLI(t, "operator", "snapshot", "inspect", "-json", file)
	var insp inspect.Report
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &insp) != nil {
		t.Fatalf("inspect -json exp: an inspection got: %+v", r)
	}
	if insp.Tables["volumes"] != 1 || insp.Tables["evals"] != 1 || insp.Tables["nodes"] != 1 || insp.Meta.Index == 0 {
		t.Fatalf("inspection exp: 1 volume, 1 eval, 1 node, an index got: %+v", insp)
	}
	r = harness.RunCLI(t, "operator", "snapshot", "inspect", file)
	for _, want := range []string{"Index", fmt.Sprint(insp.Meta.Index), insp.StateSHA256, "volumes", "acl_tokens"} {
		if r.Code != 0 || !strings.Contains(r.Stdout, want) {
			t.Fatalf("inspect exp: output with %q got: %+v", want, r)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	raw, _ := os.ReadFile(file)
	raw[len(raw)-3] ^= 0xff
	if err := os.WriteFile(bad, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := harness.RunCLI(t, "operator", "snapshot", "inspect", bad); r.Code != 1 || !strings.Contains(r.Stderr, "corrupt") {
		t.Fatalf("inspect of a damaged file exp: exit 1, corrupt got: %+v", r)
	}
	args = append([]string{"operator", "snapshot", "restore"}, append(tlsFlags, "-token", c.ManagementToken(), bad)...)
	if r := harness.RunCLI(t, args...); r.Code != 1 || !strings.Contains(r.Stderr, "nothing was sent") {
		t.Fatalf("restore of a damaged file exp: refused before sending got: %+v", r)
	}

	// The cluster moves on: the release finishes, more volumes come.
	plug.SetControl(hostdir.Control{})
	harness.WaitFor(t, 60*time.Second, func() error {
		if n := pending(); n != 0 {
			return fmt.Errorf("pending evals of v1 exp: 0 got: %d", n)
		}
		return nil
	})
	for i := range 5 {
		if _, err := cl.RegisterVolumes(ctx, testVolume(fmt.Sprintf("later%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	lastBefore := c.Leader().Server().Raft().LastIndex()

	// Restored: the later volumes are gone, the release is pending again
	// and the watcher releases it again.
	args = append([]string{"operator", "snapshot", "restore"}, append(tlsFlags, "-token", c.ManagementToken(), file)...)
	if r := harness.RunCLI(t, args...); r.Code != 0 || !strings.Contains(r.Stdout, "Restored") {
		t.Fatalf("snapshot restore exp: restored got: %+v", r)
	}
	if last := c.WaitForLeader(electionWait).Server().Raft().LastIndex(); last <= lastBefore {
		t.Fatalf("raft index after the restore exp: > %d (never back) got: %d", lastBefore, last)
	}
	if _, _, err := cl.Volume(ctx, "later0", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("a volume registered after the save exp: not_found after the restore got: %v", err)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		v, _, err := cl.Volume(harness.Ctx(t, 10*time.Second), "v1", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(v.PastClaims) != 0 || pending() != 0 {
			return fmt.Errorf("v1 exp: released again, no pending eval got: past claims %v", v.PastClaims)
		}
		return nil
	})
	unpublishes := 0
	for _, e := range plug.Audit() {
		if e.Method == "NodeUnpublishVolume" && e.Result == "ok" {
			unpublishes++
		}
	}
	if unpublishes < 2 {
		t.Fatalf("successful NodeUnpublishVolume calls exp: 2 (before and after the restore) got: %d", unpublishes)
	}

	// A limited token may not restore.
	reader := operatorReadToken(t, cl)
	args = append([]string{"operator", "snapshot", "restore"}, append(tlsFlags, "-token", reader, file)...)
	if r := harness.RunCLI(t, args...); r.Code != 1 || !strings.Contains(r.Stderr, "permission_denied") {
		t.Fatalf("restore with an operator:read token exp: permission_denied got: %+v", r)
	}
}

// Without TLS and ACLs the stream is plaintext and needs no token; a
// restore of the cluster's own archive changes nothing.
func TestSnapshot_PlaintextWithoutACLs(t *testing.T) {
	ctx := harness.Ctx(t, time.Minute)
	c := harness.NewCluster(t, 1, harness.Options{Insecure: true})
	c.StartAll()
	c.WaitForLeader(electionWait)
	cl := c.Servers[0].Client()
	reg, err := cl.RegisterVolumes(ctx, testVolume("v1"))
	if err != nil {
		t.Fatal(err)
	}
	idx := reg.Index
	var archive bytes.Buffer
	meta, err := cl.SnapshotSave(ctx, &archive, api.SnapshotOptions{})
	if err != nil || meta.Index < idx {
		t.Fatalf("save exp: state at index >= %d got: %+v %v", idx, meta, err)
	}
	before, err := digests(t, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.SnapshotRestore(ctx, bytes.NewReader(archive.Bytes()), api.SnapshotOptions{}); err != nil {
		t.Fatalf("restore exp: no error got: %v", err)
	}
	after, err := digests(t, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if after["s1"] != before["s1"] {
		t.Fatalf("digest after restoring the same state exp: %s got: %s", before["s1"], after["s1"])
	}
}
