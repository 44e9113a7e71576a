package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// publishedAt is where the node plugin last published a volume (its
// NodePublishVolume target): the directory the allocation sees.
func publishedAt(t *testing.T, p *harness.TestPlugin, externalID string) string {
	t.Helper()
	target := ""
	for _, en := range p.Audit() {
		if en.Method == "NodePublishVolume" && en.Volume == externalID && en.Result == "ok" {
			target = en.Target
		}
	}
	if target == "" {
		t.Fatalf("exp: a NodePublishVolume of %s on %s got: none", externalID, p.Name)
	}
	return target
}

// volumeTableIndex is the volumes table's index: it moves with any volume
// write, so an unchanged index means a refused request registered nothing.
func volumeTableIndex(t *testing.T, e *releaseEnv) uint64 {
	t.Helper()
	_, meta, err := e.api.Volumes(harness.Ctx(t, 10*time.Second), "", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return meta.Index
}

func pluginVolumes(t *testing.T, e *releaseEnv) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.root, "volumes"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

// Issue 18's lifecycle on a secured three-server cluster with real agents,
// the built-in plugin as controller on one agent and as node plugin on
// another: create -> claim (write a file) -> release -> snapshot -> create
// from the snapshot (the file is there) -> expand (controller, recorded
// size, node) -> delete. Refusals change nothing and call no plugin; a
// node whose expansion fails or that is down is reported pending.
func TestVolumeLifecycle_CreateSnapshotRestoreExpandDelete(t *testing.T) {
	e := newCreateEnv(t)
	ctx := func() context.Context { return harness.Ctx(t, 60*time.Second) }
	w1 := e.clients["w1"].NodeID()

	// Create and use: a file written through the allocation's mount.
	if _, err := e.api.CreateVolume(ctx(), createSpec("src")); err != nil {
		t.Fatalf("create exp: no error got: %v", err)
	}
	e.run(t, "a1", "w1", "src")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	if err := os.WriteFile(filepath.Join(publishedAt(t, e.nodes["w1"], "src"), "greeting"), []byte("hello from a1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.StopAllocs(ctx(), "a1"); err != nil {
		t.Fatal(err)
	}
	e.waitFreed(t, "src", 60*time.Second)

	// Snapshot refusals name the field and call no plugin.
	if _, err := e.api.CreateSnapshot(ctx(), "nosuch", "s1", nil); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("snapshot of an unknown volume exp: not_found got: %v", err)
	}
	if _, err := e.api.CreateSnapshot(ctx(), "src", "../s1", nil); !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "name") {
		t.Fatalf("snapshot with a bad name exp: invalid naming name got: %v", err)
	}
	if n := countMethod(e.controller.Audit(), "CreateSnapshot"); n != 0 {
		t.Fatalf("CreateSnapshot calls after refusals exp: 0 got: %d", n)
	}

	// Snapshot, through a follower; a repeat by name is the same snapshot.
	snap, err := e.c.Followers()[0].Client().CreateSnapshot(ctx(), "src", "src-monday", nil)
	if err != nil {
		t.Fatalf("snapshot exp: no error got: %v", err)
	}
	if snap.ID == "" || snap.SourceVolumeID != "src" || snap.SourceExternalID != "src" || !snap.ReadyToUse || snap.PluginID != "hostdir" {
		t.Fatalf("snapshot exp: ready snapshot of src by plugin hostdir got: %+v", snap)
	}
	again, err := e.api.CreateSnapshot(ctx(), "src", "src-monday", nil)
	if err != nil || again.ID != snap.ID {
		t.Fatalf("repeated snapshot exp: the same ID %q got: %+v (%v)", snap.ID, again, err)
	}
	for _, plugin := range []string{"", "hostdir"} {
		list, err := e.api.Snapshots(ctx(), plugin)
		if err != nil || len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap.ID || list.Snapshots[0].SourceVolumeID != "src" ||
			len(list.Unreachable) != 0 {
			t.Fatalf("snapshot list (plugin %q) exp: the one snapshot of src got: %+v (%v)", plugin, list, err)
		}
	}
	if _, err := e.api.Snapshots(ctx(), "nosuch"); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("snapshot list of an unknown plugin exp: not_found got: %v", err)
	}

	// A create from a snapshot the plugin does not have: the plugin's
	// refusal, nothing registered, no plugin volume.
	idx, before := volumeTableIndex(t, e), pluginVolumes(t, e)
	bad := createSpec("fromnothing")
	bad.SnapshotID = "no-such-snapshot"
	if _, err := e.api.CreateVolume(ctx(), bad); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("create from an unknown snapshot exp: not_found got: %v", err)
	}
	if got := volumeTableIndex(t, e); got != idx {
		t.Fatalf("volumes index after a refused create exp: %d got: %d", idx, got)
	}
	if got := pluginVolumes(t, e); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatalf("plugin volumes after a refused create exp: %v got: %v", before, got)
	}

	// Create from the snapshot: the new volume holds the file.
	restore := createSpec("restored")
	restore.SnapshotID = snap.ID
	res, err := e.api.CreateVolume(ctx(), restore)
	restored := res.Volume
	if err != nil {
		t.Fatalf("create from snapshot exp: no error got: %v", err)
	}
	e.run(t, "a2", "w1", "restored")
	e.waitAlloc(t, "a2", structs.AllocClientRunning)
	mnt := publishedAt(t, e.nodes["w1"], restored.ExternalID)
	if b, err := os.ReadFile(filepath.Join(mnt, "greeting")); err != nil || string(b) != "hello from a1" {
		t.Fatalf("file in the restored volume exp: %q got: %q (%v)", "hello from a1", b, err)
	}

	// Expansion refusals: shrinking and unknown volumes call no plugin.
	if _, err := e.api.ExpandVolume(ctx(), "restored", 512<<10); !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("shrink exp: invalid naming capacity got: %v", err)
	}
	if _, err := e.api.ExpandVolume(ctx(), "nosuch", 4<<20); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("expand of an unknown volume exp: not_found got: %v", err)
	}
	if n := countMethod(e.controller.Audit(), "ControllerExpandVolume"); n != 0 {
		t.Fatalf("ControllerExpandVolume calls after refusals exp: 0 got: %d", n)
	}

	// Expand while a2 runs: controller, recorded size, then w1's node
	// plugin grows its view where the volume is staged.
	out, err := e.c.Followers()[1].Client().ExpandVolume(ctx(), "restored", 4<<20)
	if err != nil {
		t.Fatalf("expand exp: no error got: %v", err)
	}
	if out.Capacity != 4<<20 || strings.Join(out.NodesExpanded, ",") != w1 || len(out.NodesPending) != 0 || out.Volume.Capacity != 4<<20 {
		t.Fatalf("expand exp: capacity %d, node %s expanded, none pending got: %+v", 4<<20, w1, out)
	}
	expectNodeExpansion(t, e, "restored", 4<<20)

	// A node plugin failure leaves the node pending with the reason; the
	// size is recorded, and repeating the expansion finishes the node.
	e.nodes["w1"].SetControl(hostdir.Control{Fail: map[string]int{"NodeExpandVolume": 1},
		FailMessage: map[string]string{"NodeExpandVolume": "resize2fs busy"}})
	out, err = e.api.ExpandVolume(ctx(), "restored", 6<<20)
	if err != nil || out.Capacity != 6<<20 || len(out.NodesExpanded) != 0 || !strings.Contains(out.NodesPending[w1], "resize2fs busy") {
		t.Fatalf("expand with a failing node exp: capacity %d, %s pending with the plugin's reason got: %+v (%v)", 6<<20, w1, out, err)
	}
	if v, _, err := e.api.Volume(ctx(), "restored", structs.QueryOptions{}); err != nil || v.Capacity != 6<<20 {
		t.Fatalf("recorded capacity exp: %d got: %+v (%v)", 6<<20, v, err)
	}
	out, err = e.api.ExpandVolume(ctx(), "restored", 6<<20)
	if err != nil || strings.Join(out.NodesExpanded, ",") != w1 || len(out.NodesPending) != 0 {
		t.Fatalf("repeated expand exp: %s expanded got: %+v (%v)", w1, out, err)
	}
	expectNodeExpansion(t, e, "restored", 6<<20)

	// A node that is down: its claim is past but the volume still mounted
	// there, so the expansion says it is pending on that node.
	e.clients["w1"].Stop()
	harness.WaitFor(t, 60*time.Second, func() error {
		n, _, err := e.api.Node(ctx(), w1, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.Status != structs.NodeStatusDown {
			return errors.New("w1 exp: down got: " + string(n.Status))
		}
		return nil
	})
	out, err = e.api.ExpandVolume(ctx(), "restored", 8<<20)
	if err != nil || out.Capacity != 8<<20 || !strings.Contains(out.NodesPending[w1], "down") {
		t.Fatalf("expand with w1 down exp: capacity %d, %s pending as down got: %+v (%v)", 8<<20, w1, out, err)
	}
	e.clients["w1"].Start()
	e.waitFreed(t, "restored", 90*time.Second)

	// Delete: the snapshot, then both volumes; nothing is left.
	if err := e.api.DeleteSnapshot(ctx(), "hostdir", snap.ID); err != nil {
		t.Fatalf("snapshot delete exp: no error got: %v", err)
	}
	if err := e.api.DeleteSnapshot(ctx(), "hostdir", snap.ID); err != nil {
		t.Fatalf("second snapshot delete exp: success (CSI: unknown is deleted) got: %v", err)
	}
	if list, err := e.api.Snapshots(ctx(), "hostdir"); err != nil || len(list.Snapshots) != 0 {
		t.Fatalf("snapshots after delete exp: none got: %+v (%v)", list, err)
	}
	for _, id := range []string{"src", "restored"} {
		if _, err := e.api.DeleteVolume(ctx(), id); err != nil {
			t.Fatalf("delete %s exp: no error got: %v", id, err)
		}
	}
	if got := pluginVolumes(t, e); len(got) != 0 {
		t.Fatalf("plugin volumes after delete exp: none got: %v", got)
	}
	if vols, _, err := e.api.Volumes(ctx(), "", structs.QueryOptions{}); err != nil || len(vols) != 0 {
		t.Fatalf("registered volumes after delete exp: none got: %d (%v)", len(vols), err)
	}
}

// expectNodeExpansion reads the record w1's node plugin leaves when it
// expands a volume.
func expectNodeExpansion(t *testing.T, e *releaseEnv, vol string, capacity int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, "expansions", e.nodes["w1"].NodeID, vol+".json"))
	if err != nil {
		t.Fatalf("node expansion record of %s exp: present got: %v", vol, err)
	}
	var rec struct {
		CapacityBytes int64 `json:"capacity_bytes"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.CapacityBytes != capacity {
		t.Fatalf("node expansion record of %s exp: %d bytes got: %s (%v)", vol, capacity, b, err)
	}
}

// Topology end to end: the controller creates volumes reachable from zone
// a, the node plugins report zone a (wa) and zone b (wb). A volume created
// with a required zone a topology records the plugin's accessible
// topology; a claim from wb fails its alloc as unschedulable (not retried),
// a claim from wa runs. Specs the plugin cannot serve or that are bad are
// refused with nothing changed.
func TestVolumeLifecycle_TopologyEndToEnd(t *testing.T) {
	e := newReleaseEnvWith(t, func(p *harness.TestPlugin) { p.Topology = map[string]string{"zone": p.Name[1:]} }, "wa", "wb")
	e.controller.Stop()
	e.controller.NoAutoCreate = true
	e.controller.Topology = map[string]string{"zone": "a"}
	e.controller.Start()
	ctx := func() context.Context { return harness.Ctx(t, 60*time.Second) }
	harness.WaitFor(t, applyWait, func() error {
		p, _, err := e.api.Plugin(ctx(), "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.ControllersHealthy != 1 || p.Nodes[e.clients["wb"].NodeID()].AccessibleTopology["zone"] != "b" {
			return errors.New("plugin exp: healthy controller and wb in zone b got: not yet")
		}
		return nil
	})

	idx, before := volumeTableIndex(t, e), pluginVolumes(t, e)
	bad := createSpec("zbad")
	bad.Topology = &structs.VolumeTopologyRequest{Required: []map[string]string{{}}}
	if _, err := e.api.CreateVolume(ctx(), bad); !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "topology_request.required[0]") {
		t.Fatalf("empty required topology exp: invalid naming topology_request.required[0] got: %v", err)
	}
	elsewhere := createSpec("zc")
	elsewhere.Topology = &structs.VolumeTopologyRequest{Required: []map[string]string{{"zone": "c"}}}
	if _, err := e.api.CreateVolume(ctx(), elsewhere); err == nil || !strings.Contains(err.Error(), "requisite") {
		t.Fatalf("volume required in zone c exp: the plugin's refusal got: %v", err)
	}
	if got := volumeTableIndex(t, e); got != idx {
		t.Fatalf("volumes index after refused creates exp: %d got: %d", idx, got)
	}
	if got := pluginVolumes(t, e); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatalf("plugin volumes after refused creates exp: %v got: %v", before, got)
	}

	spec := createSpec("zoned")
	spec.Topology = &structs.VolumeTopologyRequest{Required: []map[string]string{{"zone": "a"}}}
	res, err := e.api.CreateVolume(ctx(), spec)
	vol := res.Volume
	if err != nil {
		t.Fatalf("create in zone a exp: no error got: %v", err)
	}
	if len(vol.AccessibleTopology) != 1 || vol.AccessibleTopology[0]["zone"] != "a" {
		t.Fatalf("created volume exp: accessible from zone a got: %v", vol.AccessibleTopology)
	}

	e.run(t, "from-b", "wb", "zoned")
	e.waitAlloc(t, "from-b", structs.AllocClientFailed)
	a, _, err := e.api.Alloc(ctx(), "from-b", structs.QueryOptions{})
	if err != nil || !strings.Contains(a.ClientDescription, strings.TrimSpace(structs.TopologyRefusal)) {
		t.Fatalf("claim from zone b exp: failed with the topology reason got: %+v (%v)", a, err)
	}
	e.run(t, "from-a", "wa", "zoned")
	e.waitAlloc(t, "from-a", structs.AllocClientRunning)
	if n := countCalls(e.nodes["wb"].Audit(), "NodeStageVolume", vol.ExternalID, ""); n != 0 {
		t.Fatalf("NodeStageVolume on wb exp: 0 got: %d", n)
	}
}

// The leader dies after the plugin created a volume but before the
// register entry: the controller holds CreateVolume's answer back
// (delay_after) until the leader is shut down hard. Nothing is registered
// then; the retry at the new leader asks the plugin again by the same name
// (the volume ID), gets the volume it already made, and registers it:
// exactly one registered volume and one plugin volume.
func TestVolumeCreate_LeaderKilledBetweenCreateAndRegister(t *testing.T) {
	// The retry at the new leader waits out its storage hold-off. (The
	// first create's window is then 4.75 s, not 9.5 s; the leader is
	// stopped as soon as the plugin has created the volume, well inside it.)
	e := newCreateEnvOpts(t, harness.Options{Configure: shortStorageLease})
	e.controller.SetControl(hostdir.Control{DelayAfter: map[string]string{"CreateVolume": "20s"}})
	leader := e.c.Leader()
	if leader == nil {
		t.Fatal("no leader")
	}
	errc := make(chan error, 1)
	go func() {
		_, err := leader.Client().CreateVolume(harness.Ctx(t, 60*time.Second), createSpec("vcrash"))
		errc <- err
	}()
	harness.WaitFor(t, 30*time.Second, func() error {
		if countCalls(e.controller.Audit(), "CreateVolume", "vcrash", "ok") != 1 {
			return errors.New("CreateVolume of vcrash exp: done by the plugin got: not yet")
		}
		return nil
	})
	leader.Stop()
	if err := <-errc; err == nil {
		t.Fatal("create at a leader that died before registering exp: an error got: success")
	}
	next := e.c.WaitForLeader(electionWait)
	api := next.Client()
	if _, _, err := api.Volume(harness.Ctx(t, 30*time.Second), "vcrash", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("volume after the leader died exp: not registered got: %v", err)
	}
	if got := pluginVolumes(t, e); strings.Join(got, ",") != "vcrash" {
		t.Fatalf("plugin volumes after the leader died exp: [vcrash] got: %v", got)
	}

	e.controller.SetControl(hostdir.Control{})
	res, err := api.CreateVolume(harness.Ctx(t, 60*time.Second), createSpec("vcrash"))
	vol := res.Volume
	if err != nil {
		t.Fatalf("retry at the new leader exp: no error got: %v", err)
	}
	if vol.ExternalID != "vcrash" || vol.Capacity != 1<<20 {
		t.Fatalf("retried create exp: the plugin's vcrash of %d bytes got: %+v", 1<<20, vol)
	}
	vols, _, err := api.Volumes(harness.Ctx(t, 30*time.Second), "", structs.QueryOptions{})
	if err != nil || len(vols) != 1 || vols[0].ID != "vcrash" {
		t.Fatalf("registered volumes exp: exactly vcrash got: %v (%v)", vols, err)
	}
	if got := pluginVolumes(t, e); strings.Join(got, ",") != "vcrash" {
		t.Fatalf("plugin volumes after the retry exp: [vcrash] got: %v", got)
	}
	if n := countCalls(e.controller.Audit(), "CreateVolume", "vcrash", "ok"); n != 2 {
		t.Fatalf("CreateVolume calls exp: 2 (the lost answer and the retry, one volume) got: %d", n)
	}
}

// The real binary: `volume snapshot create|list|delete` and `volume expand
// VOL -capacity SIZE` (flags after the volume, as the issue writes it)
// through a follower with the CLI certificate and a management token.
func TestVolumeLifecycle_CLI(t *testing.T) {
	e := newCreateEnv(t)
	flags := cliFlagsVia(e, e.c.Followers()[0])
	cli := func(verb []string, args ...string) harness.CLIResult {
		return harness.RunCLI(t, append(append(verb, flags...), args...)...)
	}
	if _, err := e.api.CreateVolume(harness.Ctx(t, 60*time.Second), createSpec("data")); err != nil {
		t.Fatal(err)
	}
	r := cli([]string{"volume", "snapshot", "create"}, "data", "data-1")
	if r.Code != 0 || !strings.Contains(r.Stdout, `Snapshot "data-1" of volume "data" created`) {
		t.Fatalf("snapshot create exp: exit 0 got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	list, err := e.api.Snapshots(harness.Ctx(t, 30*time.Second), "hostdir")
	if err != nil || len(list.Snapshots) != 1 {
		t.Fatalf("snapshots exp: 1 got: %+v (%v)", list, err)
	}
	id := list.Snapshots[0].ID
	r = cli([]string{"volume", "snapshot", "list"}, "-plugin", "hostdir")
	if r.Code != 0 || !strings.Contains(r.Stdout, id) || !strings.Contains(r.Stdout, "data") {
		t.Fatalf("snapshot list exp: the snapshot with its volume got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	r = cli([]string{"volume", "expand"}, "data", "-capacity", "3MiB")
	if r.Code != 0 || !strings.Contains(r.Stdout, `Volume "data" expanded to 3145728 bytes`) {
		t.Fatalf("expand exp: exit 0 with the new size got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	r = cli([]string{"volume", "expand"}, "data", "-capacity", "1MiB")
	if r.Code != 1 || !strings.Contains(r.Stderr, "capacity") || !strings.Contains(r.Stderr, "shrinking") {
		t.Fatalf("shrink exp: exit 1 naming capacity got: %d %s", r.Code, r.Stderr)
	}
	r = cli([]string{"volume", "snapshot", "delete"}, "hostdir", id)
	if r.Code != 0 || !strings.Contains(r.Stdout, "deleted") {
		t.Fatalf("snapshot delete exp: exit 0 got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	r = cli([]string{"volume", "snapshot", "list"})
	if r.Code != 0 || !strings.Contains(r.Stdout, "No snapshots") {
		t.Fatalf("snapshot list after delete exp: none got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	r = cli([]string{"plugin", "status"})
	if r.Code != 0 || !strings.Contains(r.Stdout, "create_delete_snapshot") || !strings.Contains(r.Stdout, "1/1") {
		t.Fatalf("plugin status list exp: capabilities and healthy counts got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
}

// A plugin that does not advertise what a request needs is refused before
// any call, as invalid naming the field: its only controller is a node
// registered over the API with no agent behind it, so a call that got
// through would fail unavailable instead. The same plugin with the
// capabilities gets as far as that call.
func TestVolumeLifecycle_RefusedWithoutCapability(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{Configure: longHeartbeats})
	c.StartAll()
	c.WaitForLeader(electionWait)
	cl := c.Followers()[0].Client()
	ctx := func() context.Context { return harness.Ctx(t, 60*time.Second) }
	register := func(id string, cc *structs.CSIControllerCapabilities, nc *structs.CSINodeCapabilities) {
		t.Helper()
		node := &structs.Node{ID: "n-" + id, Name: id, SecretID: "secret-" + id, Status: structs.NodeStatusReady,
			CSIControllerPlugins: map[string]*structs.CSIInfo{id: {PluginID: id, Healthy: true, ControllerCapabilities: cc}},
			CSINodePlugins:       map[string]*structs.CSIInfo{id: {PluginID: id, Healthy: true, ExternalNodeID: "ext", NodeCapabilities: nc}}}
		// Registering binds the session as the node's; a session of its
		// own, closed at once, leaves the node with none.
		reg := c.Followers()[1].Client()
		_, err := reg.RegisterNode(ctx(), node)
		reg.Close()
		if err != nil {
			t.Fatal(err)
		}
		// Its controller is what the plugin's capabilities come from
		// once admitted (issue 38).
		c.AdmitNodeControllers(node.ID, id)
		v := testVolume("vol-" + id)
		v.PluginID = id
		if _, err := cl.RegisterVolumes(ctx(), v); err != nil {
			t.Fatal(err)
		}
	}
	register("bare", &structs.CSIControllerCapabilities{PublishUnpublish: true}, &structs.CSINodeCapabilities{})
	register("able", &structs.CSIControllerCapabilities{CreateDeleteSnapshot: true, ListSnapshots: true, ExpandVolume: true},
		&structs.CSINodeCapabilities{ExpandVolume: true})

	wantInvalid := func(what, field, capability string, err error) {
		t.Helper()
		if !errors.Is(err, structs.ErrInvalid) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), "invalid: "), field+":") ||
			!strings.Contains(err.Error(), capability) {
			t.Fatalf("%s exp: invalid naming %s and %s got: %v", what, field, capability, err)
		}
	}
	_, err := cl.CreateSnapshot(ctx(), "vol-bare", "s1", nil)
	wantInvalid("snapshot create", "volume_id", "CREATE_DELETE_SNAPSHOT", err)
	wantInvalid("snapshot delete", "plugin_id", "CREATE_DELETE_SNAPSHOT", cl.DeleteSnapshot(ctx(), "bare", "s1"))
	_, err = cl.Snapshots(ctx(), "bare")
	wantInvalid("snapshot list", "plugin_id", "LIST_SNAPSHOTS", err)
	_, err = cl.ExpandVolume(ctx(), "vol-bare", 1<<30)
	wantInvalid("expand", "volume_id", "EXPAND_VOLUME", err)
	// Listing every plugin skips the one that cannot list.
	if list, err := cl.Snapshots(ctx(), ""); err != nil || len(list.Unreachable) != 1 || list.Unreachable["able"] == "" {
		t.Fatalf("snapshot list of every plugin exp: only able asked (unreachable, no agent) got: %+v (%v)", list, err)
	}

	_, err = cl.CreateSnapshot(ctx(), "vol-able", "s1", nil)
	if !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("snapshot create with the capability exp: the controller call tried (unavailable) got: %v", err)
	}
	_, err = cl.ExpandVolume(ctx(), "vol-able", 1<<30)
	if !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("expand with the capability exp: the controller call tried (unavailable) got: %v", err)
	}
	if v, _, err := cl.Volume(ctx(), "vol-able", structs.QueryOptions{}); err != nil || v.Capacity != 0 {
		t.Fatalf("volume after a failed expand exp: capacity unchanged got: %+v (%v)", v, err)
	}
}

// Issue 18 item 4's other half: re-registering a volume with a larger
// capacity grows it through the same steps as `volume expand`
// (ControllerExpandVolume, the recorded size, NodeExpandVolume where it is
// staged), and so does repeating a create with a larger capacity_min.
// A smaller size is refused naming the field with nothing changed (in a
// batch too); a first registration, or one without a size, calls no
// plugin; growing needs what expand needs (volume:create). A growth that
// fails at the plugin is retried by registering again. The CLI exits 2
// while a node is pending. On the secured three-server cluster with the
// plugin as controller on one agent and as node plugin on another.
func TestVolumeLifecycle_RegisterAndCreateGrow(t *testing.T) {
	e := newCreateEnv(t)
	ctx := func() context.Context { return harness.Ctx(t, 60*time.Second) }
	w1 := e.clients["w1"].NodeID()
	cr, err := e.api.CreateVolume(ctx(), createSpec("grow"))
	created := cr.Volume
	if err != nil {
		t.Fatalf("create exp: no error got: %v", err)
	}
	e.run(t, "a1", "w1", "grow")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	// The register spec an operator keeps for the created volume (the
	// record's secrets are redacted, so they come from the spec).
	spec := func(capacity int64, tier string) *structs.Volume {
		return &structs.Volume{ID: "grow", Name: "created grow", ExternalID: created.ExternalID, PluginID: "hostdir",
			AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
			Context: created.Context, Parameters: map[string]string{"tier": tier}, Secrets: structs.Secrets{"token": "s3cret"},
			Capacity: capacity}
	}
	expands := func() (controller, node int) {
		return countCalls(e.controller.Audit(), "ControllerExpandVolume", created.ExternalID, "ok"),
			countCalls(e.nodes["w1"].Audit(), "NodeExpandVolume", created.ExternalID, "ok")
	}
	recorded := func() *structs.Volume {
		t.Helper()
		v, _, err := e.api.Volume(ctx(), "grow", structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// A first registration with a size, and a re-registration without one
	// or with the recorded one: changes of record, no plugin call.
	byHand := testVolume("byhand")
	byHand.Capacity = 2 << 20
	if out, err := e.api.RegisterVolumes(ctx(), byHand); err != nil || len(out.Expanded) != 0 {
		t.Fatalf("first registration exp: nothing grown got: %+v (%v)", out, err)
	}
	for _, c := range []int64{0, 1 << 20} {
		if out, err := e.api.RegisterVolumes(ctx(), spec(c, "fast")); err != nil || len(out.Expanded) != 0 {
			t.Fatalf("re-register with capacity %d exp: nothing grown got: %+v (%v)", c, out, err)
		}
	}
	if n := countMethod(e.controller.Audit(), "ControllerExpandVolume"); n != 0 {
		t.Fatalf("ControllerExpandVolume calls after changes of record exp: 0 got: %d", n)
	}
	if v := recorded(); v.Capacity != 1<<20 {
		t.Fatalf("capacity after a register without one exp: %d kept got: %d", 1<<20, v.Capacity)
	}

	// Re-register with more, through a follower: the controller grows it,
	// the size is recorded, w1 (where a1 has it staged) expands, and the
	// spec's other change lands.
	out, err := e.c.Followers()[0].Client().RegisterVolumes(ctx(), spec(3<<20, "slow"))
	if err != nil {
		t.Fatalf("re-register with a larger capacity exp: no error got: %v", err)
	}
	if len(out.Expanded) != 1 || out.Expanded[0].VolumeID != "grow" || out.Expanded[0].Previous != 1<<20 ||
		out.Expanded[0].Capacity != 3<<20 || strings.Join(out.Expanded[0].NodesExpanded, ",") != w1 || len(out.Expanded[0].NodesPending) != 0 {
		t.Fatalf("re-register exp: grow grown from %d to %d, %s expanded got: %+v", 1<<20, 3<<20, w1, out.Expanded)
	}
	if c, n := expands(); c != 1 || n != 1 {
		t.Fatalf("expansion calls exp: 1 ControllerExpandVolume, 1 NodeExpandVolume got: %d, %d", c, n)
	}
	expectNodeExpansion(t, e, "grow", 3<<20)
	if v := recorded(); v.Capacity != 3<<20 || v.Parameters["tier"] != "slow" || v.ModifyIndex != out.Index ||
		out.Expanded[0].CapacityIndex != out.Index || out.RegisterIndex == 0 || out.RegisterIndex >= out.Index {
		t.Fatalf("recorded volume exp: capacity %d, tier slow, at the capacity entry's index %d after the registration's %d got: %+v",
			3<<20, out.Index, out.RegisterIndex, v)
	}
	if again, err := e.api.RegisterVolumes(ctx(), spec(3<<20, "slow")); err != nil || len(again.Expanded) != 0 {
		t.Fatalf("repeated re-register exp: nothing grown got: %+v (%v)", again, err)
	}

	// Smaller: refused naming the field, alone or in a batch with a good
	// new volume; nothing is written and no plugin is called.
	idx := volumeTableIndex(t, e)
	if _, err := e.api.RegisterVolumes(ctx(), spec(2<<20, "fast")); !errors.Is(err, structs.ErrInvalid) ||
		!strings.HasPrefix(err.Error(), "invalid: capacity:") || !strings.Contains(err.Error(), "shrinking") {
		t.Fatalf("re-register with a smaller capacity exp: invalid naming capacity got: %v", err)
	}
	if _, err := e.api.RegisterVolumes(ctx(), testVolume("fresh"), spec(2<<20, "fast")); !errors.Is(err, structs.ErrInvalid) ||
		!strings.Contains(err.Error(), "volumes[1].capacity") {
		t.Fatalf("batch with a smaller capacity exp: invalid naming volumes[1].capacity got: %v", err)
	}
	// Growing needs what expand needs: a token that may only register is
	// refused before anything is written.
	mgmt := e.api
	if _, err := mgmt.ACLPolicyApply(ctx(), "register-only", "volume:register only", `volume { capabilities = ["register"] }`); err != nil {
		t.Fatal(err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx(), "register-only", "", []string{"register-only"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Servers[1].ClientWithToken(tok.SecretID).RegisterVolumes(ctx(), testVolume("fresh"), spec(4<<20, "fast")); !errors.Is(err, structs.ErrPermissionDenied) ||
		!strings.Contains(err.Error(), "volume:create") || strings.Contains(err.Error(), tok.SecretID) {
		t.Fatalf("growth with a register-only token exp: permission_denied naming volume:create got: %v", err)
	}
	if got := volumeTableIndex(t, e); got != idx {
		t.Fatalf("volumes index after refused registrations exp: %d got: %d", idx, got)
	}
	if _, _, err := e.api.Volume(ctx(), "fresh", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("volume of a refused batch exp: not_found got: %v", err)
	}
	if c, n := expands(); c != 1 || n != 1 {
		t.Fatalf("expansion calls after refusals exp: 1, 1 got: %d, %d", c, n)
	}

	// Create again with a larger capacity_min: grown the same way, no
	// second CreateVolume; one asking for less than recorded is refused.
	more := createSpec("grow")
	more.CapacityMin = 5 << 20
	res, err := e.api.CreateVolume(ctx(), more)
	if err != nil {
		t.Fatalf("repeated create with a larger capacity_min exp: no error got: %v", err)
	}
	if res.Expanded == nil || res.Expanded.Previous != 3<<20 || res.Expanded.Capacity != 5<<20 ||
		strings.Join(res.Expanded.NodesExpanded, ",") != w1 || res.Volume.Capacity != 5<<20 {
		t.Fatalf("repeated create exp: grown from %d to %d, %s expanded got: %+v %+v", 3<<20, 5<<20, w1, res.Expanded, res.Volume)
	}
	if c, n := expands(); c != 2 || n != 2 {
		t.Fatalf("expansion calls after the create exp: 2, 2 got: %d, %d", c, n)
	}
	if n := countMethod(e.controller.Audit(), "CreateVolume"); n != 1 {
		t.Fatalf("CreateVolume calls exp: 1 got: %d", n)
	}
	expectNodeExpansion(t, e, "grow", 5<<20)
	less := createSpec("grow")
	less.CapacityMax = 4 << 20
	if _, err := e.api.CreateVolume(ctx(), less); !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "capacity_max") {
		t.Fatalf("create with capacity_max below the recorded size exp: conflict naming capacity_max got: %v", err)
	}

	// A batch whose first growth fails at the plugin: the registration is
	// written, nothing is grown, the error says so; registering the same
	// batch again grows both.
	if _, err := e.api.CreateVolume(ctx(), createSpec("grow2")); err != nil {
		t.Fatal(err)
	}
	second := spec(2<<20, "slow")
	second.ID, second.Name, second.ExternalID, second.Context = "grow2", "created grow2", "grow2", nil
	e.controller.SetControl(hostdir.Control{Fail: map[string]int{"ControllerExpandVolume": 1},
		FailMessage: map[string]string{"ControllerExpandVolume": "array busy"}})
	batch := []*structs.Volume{spec(6<<20, "batch"), second}
	if _, err := e.api.RegisterVolumes(ctx(), batch...); err == nil || !strings.Contains(err.Error(), "array busy") ||
		!strings.Contains(err.Error(), `grew 0 of 2 volumes; growing "grow" failed`) {
		t.Fatalf("batch with a failing growth exp: the plugin's reason, nothing grown got: %v", err)
	}
	if v := recorded(); v.Capacity != 5<<20 || v.Parameters["tier"] != "batch" {
		t.Fatalf("volume after the failed growth exp: registered (tier batch), capacity %d got: %+v", 5<<20, v)
	}
	out, err = e.api.RegisterVolumes(ctx(), batch...)
	if err != nil || len(out.Expanded) != 2 || out.Expanded[0].Capacity != 6<<20 || out.Expanded[1].VolumeID != "grow2" ||
		out.Expanded[1].Capacity != 2<<20 || len(out.Expanded[1].NodesExpanded) != 0 {
		t.Fatalf("batch registered again exp: grow to %d, grow2 to %d (no node) got: %+v (%v)", 6<<20, 2<<20, out.Expanded, err)
	}

	// The CLI: a register file asking for more while w1's node plugin
	// fails its expansion: grown and recorded, w1 pending, exit 2 with the
	// command that finishes it; that command then exits 0.
	flags := cliFlagsVia(e, e.c.Followers()[1])
	file := filepath.Join(t.TempDir(), "grow.json")
	b, err := json.Marshal(spec(7<<20, "fast"))
	if err != nil {
		t.Fatal(err)
	}
	// The spec file holds the real secret (a Secrets value marshals
	// redacted).
	b = []byte(strings.Replace(string(b), `"<redacted>"`, `"s3cret"`, 1))
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	e.nodes["w1"].SetControl(hostdir.Control{Fail: map[string]int{"NodeExpandVolume": 1},
		FailMessage: map[string]string{"NodeExpandVolume": "resize2fs busy"}})
	r := harness.RunCLI(t, append(append([]string{"volume", "register"}, flags...), file)...)
	if r.Code != 2 || !strings.Contains(r.Stdout, `Volume "grow" registered (index `) || !strings.Contains(r.Stdout, `Volume "grow" expanded to 7340032 bytes`) || !strings.Contains(r.Stdout, "resize2fs busy") ||
		!strings.Contains(r.Stderr, "claimd volume expand grow -capacity 7340032") {
		t.Fatalf("register with a pending node exp: exit 2, grown, w1 pending got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if v := recorded(); v.Capacity != 7<<20 {
		t.Fatalf("recorded capacity exp: %d got: %d", 7<<20, v.Capacity)
	}
	r = harness.RunCLI(t, append(append([]string{"volume", "expand"}, flags...), "grow", "-capacity", "7MiB")...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "nodes expanded: "+w1) {
		t.Fatalf("expand after the pending node exp: exit 0, %s expanded got: %d %q %s", w1, r.Code, r.Stdout, r.Stderr)
	}
	expectNodeExpansion(t, e, "grow", 7<<20)
}

// Volume specs in HCL with sizes (issue 29), through the real binary:
// `volume init` writes examples, `volume create` and `volume register`
// take HCL with "2MiB"-style sizes, and a mistake is refused naming the
// file, line and key, with nothing registered.
func TestVolumeLifecycle_HCLSpecsWithSizes(t *testing.T) {
	e := newCreateEnv(t)
	flags := cliFlagsVia(e, e.c.Followers()[0])
	cli := func(verb []string, args ...string) harness.CLIResult {
		return harness.RunCLI(t, append(append(verb, flags...), args...)...)
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// volume init: the example exists afterwards and is never overwritten.
	example := filepath.Join(dir, "example.hcl")
	if r := harness.RunCLI(t, "volume", "init", "-type", "create", example); r.Code != 0 || !strings.Contains(r.Stdout, "claimd volume create "+example) {
		t.Fatalf("volume init exp: exit 0 naming the next command got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := harness.RunCLI(t, "volume", "init", example); r.Code != 1 || !strings.Contains(r.Stderr, "not overwriting") {
		t.Fatalf("volume init over a file exp: refused got: %d %s", r.Code, r.Stderr)
	}

	create := write("create.hcl", `
id           = "hcl-data"
plugin_id    = "hostdir"
capacity_min = "2MiB"
capacity_max = "4MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
parameters {
  tier = "fast"
}
`)
	if r := cli([]string{"volume", "create"}, create); r.Code != 0 || !strings.Contains(r.Stdout, "hcl-data") {
		t.Fatalf("volume create from HCL exp: exit 0 got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	v, _, err := e.api.Volume(harness.Ctx(t, 30*time.Second), "hcl-data", structs.QueryOptions{})
	if err != nil || v == nil || v.Capacity < 2<<20 || v.Capacity > 4<<20 || v.Parameters["tier"] != "fast" ||
		v.AccessMode != structs.AccessModeSingleNodeWriter {
		t.Fatalf("created volume exp: 2-4 MiB, tier fast, single-node-writer got: %+v (%v)", v, err)
	}

	register := write("register.hcl", `
id          = "hcl-reg"
external_id = "hcl-reg"
plugin_id   = "hostdir"
capacity    = "1MiB"
node_lost   = "fence"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`)
	if r := cli([]string{"volume", "register"}, register); r.Code != 0 || !strings.Contains(r.Stdout, `Volume "hcl-reg" registered`) {
		t.Fatalf("volume register from HCL exp: exit 0 got: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	v, _, err = e.api.Volume(harness.Ctx(t, 30*time.Second), "hcl-reg", structs.QueryOptions{})
	if err != nil || v == nil || v.Capacity != 1<<20 || v.NodeLost != structs.NodeLostFence {
		t.Fatalf("registered volume exp: 1 MiB, fence got: %+v (%v)", v, err)
	}

	bad := write("bad.hcl", "id          = \"hcl-bad\"\nexternal_id = \"hcl-bad\"\nplugin_id   = \"hostdir\"\ncapacity    = \"1 gig\"\n")
	if r := cli([]string{"volume", "register"}, bad); r.Code != 1 || !strings.Contains(r.Stderr, bad+":4: capacity:") {
		t.Fatalf("bad size exp: exit 1 naming file, line 4 and capacity got: %d %s", r.Code, r.Stderr)
	}
	if v, _, err := e.api.Volume(harness.Ctx(t, 30*time.Second), "hcl-bad", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("refused spec exp: nothing registered (not found) got: %+v (%v)", v, err)
	}
}

// cliFlagsVia are the CLI's flags for a call through srv, secured, with the
// CLI certificate and the management token.
func cliFlagsVia(e *releaseEnv, srv *harness.TestServer) []string {
	pki := e.c.PKI()
	return []string{"-address", srv.Addr, "-ca-cert", pki.CAFile,
		"-client-cert", pki.CertFile[tlsutil.RoleCLI], "-client-key", pki.KeyFile[tlsutil.RoleCLI],
		"-token", e.c.ManagementToken(), "-timeout", "60s"}
}
