package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/structs"
)

// The node-loss nemesis (issue 26, decision 39; see doc.go "Node loss").
// Real processes in network namespaces: w1's agent holds a short lease on
// a lease clock running 5% slow (the most the margin allows), and a real
// writer process on w1's host appends sequenced, timestamped records
// through its mount of a fence-policy volume, and another through a
// wait-policy one. The nemesis cuts w1 off from every server; the checker
// proves from the plugins' audit logs and the writers' own records that
// w1 unmounted before the controller detach and before w2's publish, that
// nothing from w1 landed after w2's first record, that the fence volume
// moved within the stated bound, and that the wait volume did not move
// until the node was back.

const (
	nlLease     = 4 * time.Second
	nlClockRate = 1 - structs.LeaseClockDrift
)

func TestChaos_NetnsNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in the chaos step (scripts/test.sh) without -short")
	}
	pids := t.TempDir()
	hook := fmt.Sprintf(`pid=$(cat %s/$CLAIMD_ALLOC_ID-$CLAIMD_VOLUME_ID 2>/dev/null) || exit 0
kill -9 "$pid" 2>/dev/null
i=0; while [ -d /proc/"$pid" ] && [ "$(cut -d' ' -f3 /proc/"$pid"/stat 2>/dev/null)" != Z ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
echo "$CLAIMD_NODE_ID $CLAIMD_ALLOC_ID $CLAIMD_VOLUME_ID $CLAIMD_MOUNT_PATH" >> %s/hook.log`, pids, pids)
	opts := nsTestOptions()
	opts.WorkerArgs = map[string][]string{"w1": {"-node-lease", nlLease.String(), "-fence-command", hook,
		"-clock-rate", strconv.FormatFloat(nlClockRate, 'f', -1, 64)}}
	c := NewNetns(t, opts).(*netnsCluster)
	admin := c.Client("s1")
	w1, w2 := c.workers[0], c.workers[1]
	vf, vw := volume("nl-fence", nsPluginID, structs.AccessModeSingleNodeWriter), volume("nl-wait", nsPluginID, structs.AccessModeSingleNodeWriter)
	vf.NodeLost, vw.NodeLost = structs.NodeLostFence, structs.NodeLostWait
	if _, err := admin.RegisterVolumes(nsTestCtx(t, 30*time.Second), vf, vw); err != nil {
		t.Fatal(err)
	}
	place := func(alloc string, w *nsWorker, vol string) {
		t.Helper()
		a := &structs.Alloc{ID: alloc, NodeID: w.nodeID, Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}}
		if _, err := admin.PlaceAllocs(nsTestCtx(t, 30*time.Second), a); err != nil {
			t.Fatal(err)
		}
	}
	status := func(alloc string) (structs.AllocClientStatus, string) {
		a, _, err := admin.Alloc(nsTestCtx(t, 10*time.Second), alloc, structs.QueryOptions{})
		if err != nil {
			return "", err.Error()
		}
		return a.ClientStatus, a.ClientDescription
	}
	waitRunning := func(alloc string, within time.Duration) time.Time {
		t.Helper()
		if err := nsPoll(within, func() error {
			if st, desc := status(alloc); st != structs.AllocClientRunning {
				return fmt.Errorf("%s exp: running got: %s (%s)", alloc, st, desc)
			}
			return nil
		}); err != nil {
			t.Fatalf("%v%s", err, c.tails())
		}
		return time.Now()
	}
	place("nl-f1", w1, vf.ID)
	place("nl-w1", w1, vw.ID)
	waitRunning("nl-f1", nsTestWait)
	waitRunning("nl-w1", nsTestWait)
	wrF := nlStartWriter(t, c, "w1", nlMountPath(t, c, w1, "nl-f1", vf.ID), filepath.Join(pids, "nl-f1-"+vf.ID))
	wrW := nlStartWriter(t, c, "w1", nlMountPath(t, c, w1, "nl-w1", vw.ID), "")

	cut := time.Now()
	if err := c.IsolateWorker("w1"); err != nil {
		t.Fatal(err)
	}
	// The fence runs on the cut node by itself: the hook kills the writer.
	select {
	case <-wrF.done:
	case <-time.After(nlLease + 15*time.Second):
		t.Fatalf("fence-policy writer on w1 exp: killed by the fence command got: still running%s", c.tails())
	}
	place("nl-f2", w2, vf.ID)
	place("nl-w2", w2, vw.ID)
	bound := structs.LeaseExpiry(nlLease) + 25*time.Second
	moved := waitRunning("nl-f2", bound)
	t.Logf("node loss: the fence-policy volume moved %s after the cut (lease %s at clock rate %g; the servers wait %s after the last heartbeat; stated bound here %s)",
		moved.Sub(cut).Round(10*time.Millisecond), nlLease, nlClockRate, structs.LeaseExpiry(nlLease), bound)
	mount2 := nlMountPath(t, c, w2, "nl-f2", vf.ID)
	wr2 := nlStartWriter(t, c, "w2", mount2, "")
	records := filepath.Join(mount2, "records")
	if err := nsPoll(nsTestWait, func() error {
		for _, r := range nlReadRecords(t, records) {
			if r.who == "w2" {
				return nil
			}
		}
		return fmt.Errorf("w2 records exp: some got none in %s", records)
	}); err != nil {
		t.Fatal(err)
	}
	_ = wr2.cmd.Process.Kill()
	<-wr2.done

	// The plugins' own records: w1's unmount, then the controller detach
	// from w1, then w2's publish.
	w1Audit, _ := hostdir.ReadAudit(w1.audit)
	w2Audit, _ := hostdir.ReadAudit(w2.audit)
	ctrlAudit, _ := hostdir.ReadAudit(c.ctrl.audit)
	unpub := nlFirstOK(w1Audit, "NodeUnpublishVolume", "ext-"+vf.ID, "")
	detach := nlFirstOK(ctrlAudit, "ControllerUnpublishVolume", "ext-"+vf.ID, "ext-w1")
	publish := nlFirstOK(w2Audit, "NodePublishVolume", "ext-"+vf.ID, "")
	if unpub.IsZero() || detach.IsZero() || publish.IsZero() || !unpub.Before(detach) || !detach.Before(publish) {
		t.Fatalf("order exp: w1 NodeUnpublish < ControllerUnpublish from w1 < w2 NodePublish got: %s, %s, %s",
			unpub.Format(time.RFC3339Nano), detach.Format(time.RFC3339Nano), publish.Format(time.RFC3339Nano))
	}
	// The writers' own records: no w1 write after w2's first, and none
	// after w1's unmount.
	var firstW2 time.Time
	n1 := 0
	for _, r := range nlReadRecords(t, records) {
		switch {
		case r.who == "w2" && firstW2.IsZero():
			firstW2 = r.at
		case r.who == "w1" && !firstW2.IsZero():
			t.Fatalf("single writer exp: no w1 record after w2's first (%s) got: one at %s", firstW2, r.at)
		case r.who == "w1":
			n1++
			if !r.at.Before(unpub) {
				t.Fatalf("fence exp: w1's records before its unmount (%s) got: one at %s", unpub, r.at)
			}
		}
	}
	if n1 == 0 || firstW2.IsZero() {
		t.Fatalf("records exp: w1's then w2's got: %d from w1, w2 first at %v", n1, firstW2)
	}
	// The record on the claim: fenced, with when the lease ran out.
	v, _, err := admin.Volume(nsTestCtx(t, 10*time.Second), vf.ID, structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fenced := false
	for _, cl := range v.Released {
		fenced = fenced || cl.AllocID == "nl-f1" && cl.Fenced && !cl.LeaseExpiredAt.IsZero()
	}
	if !fenced {
		t.Fatalf("released claim of nl-f1 exp: fenced with its lease expiry got: %+v", v.Released)
	}
	if b, err := os.ReadFile(filepath.Join(c.dataDir, "w1", "fence.json")); err != nil || !strings.Contains(string(b), `"`+vf.ID+`"`) {
		t.Fatalf("w1's fence record exp: lists %s got: %s %v", vf.ID, b, err)
	}

	// The wait-policy volume did not move: its writer still runs, no
	// controller detach, the new allocation waits.
	select {
	case <-wrW.done:
		t.Fatal("wait-policy writer exp: untouched by the fence got: killed")
	default:
	}
	ctrlAudit, _ = hostdir.ReadAudit(c.ctrl.audit)
	if !nlFirstOK(ctrlAudit, "ControllerUnpublishVolume", "ext-"+vw.ID, "").IsZero() {
		t.Fatal("wait-policy volume exp: no controller detach while the node is away got: one")
	}
	if st, desc := status("nl-w2"); st == structs.AllocClientRunning {
		t.Fatalf("wait-policy volume's new allocation exp: waiting while the node is away got: running (%s)", desc)
	}

	// The node comes back: it reports its fence and mounts nothing again;
	// the wait volume's release goes through w1's unmount and moves.
	_ = syscall.Kill(wrW.cmd.Process.Pid, syscall.SIGKILL) // its allocation was lost: the workload stops
	<-wrW.done
	publishesBefore := nlCount(w1Audit, "NodePublishVolume", "ext-"+vf.ID)
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	waitRunning("nl-w2", 60*time.Second)
	if err := nsPoll(nsTestWait, func() error {
		n, _, err := admin.Node(nsTestCtx(t, 10*time.Second), w1.nodeID, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if n.LastFence == nil || len(n.LastFence.Volumes) != 1 || n.LastFence.Volumes[0].VolumeID != vf.ID || !n.LastFence.Volumes[0].Unmounted {
			return fmt.Errorf("w1 exp: its fence of %s reported got: %+v", vf.ID, n.LastFence)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	w1Audit, _ = hostdir.ReadAudit(w1.audit)
	ctrlAudit, _ = hostdir.ReadAudit(c.ctrl.audit)
	wUnpub := nlFirstOK(w1Audit, "NodeUnpublishVolume", "ext-"+vw.ID, "")
	wDetach := nlFirstOK(ctrlAudit, "ControllerUnpublishVolume", "ext-"+vw.ID, "ext-w1")
	if wUnpub.Before(healed) || wDetach.Before(wUnpub) {
		t.Fatalf("wait-policy volume exp: w1's unmount after the heal (%s), then the controller detach got: %s, %s", healed, wUnpub, wDetach)
	}
	if n := nlCount(w1Audit, "NodePublishVolume", "ext-"+vf.ID); n != publishesBefore {
		t.Fatalf("fenced volume on the node that came back exp: not mounted again got: %d publishes (was %d)", n, publishesBefore)
	}
	nsCheckSecured(t, c)
}

// nlMountPath reads where a worker's agent mounted a volume for an
// allocation, from its held-claims record in the data dir.
func nlMountPath(t *testing.T, c *netnsCluster, w *nsWorker, alloc, vol string) string {
	t.Helper()
	var path string
	err := nsPoll(nsTestWait, func() error {
		b, err := os.ReadFile(filepath.Join(c.dataDir, w.name, "held-claims.json"))
		if err != nil {
			return err
		}
		var held []struct {
			AllocID   string `json:"alloc_id"`
			VolumeID  string `json:"volume_id"`
			MountPath string `json:"mount_path"`
		}
		if err := json.Unmarshal(b, &held); err != nil {
			return err
		}
		for _, h := range held {
			if h.AllocID == alloc && h.VolumeID == vol && h.MountPath != "" {
				path = h.MountPath
				return nil
			}
		}
		return fmt.Errorf("held claim %s/%s exp: recorded got: %s", alloc, vol, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// nlWriter is a real process on a worker's host appending
// "<host> <seq> <unix nanos>" lines through a mount until it is killed.
type nlWriter struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func nlStartWriter(t *testing.T, c *netnsCluster, host, mount, pidFile string) *nlWriter {
	t.Helper()
	script := fmt.Sprintf(`i=0; while :; do i=$((i+1)); echo "%s $i $(date +%%s%%N)" >> %s/records || exit 1; sleep 0.02; done`, host, mount)
	cmd := c.lab.Exec(host, "/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &nlWriter{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
	})
	if pidFile != "" {
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := nsPoll(nsTestWait, func() error {
		for _, r := range nlReadRecords(t, filepath.Join(mount, "records")) {
			if r.who == host {
				return nil
			}
		}
		return fmt.Errorf("writer on %s exp: a record through %s got: none", host, mount)
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

type nlRecord struct {
	who string
	at  time.Time
}

func nlReadRecords(t *testing.T, path string) []nlRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []nlRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line cut by the kill
		}
		ns, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, nlRecord{who: fields[0], at: time.Unix(0, ns)})
	}
	return out
}

func nlFirstOK(entries []hostdir.AuditEntry, method, ext, node string) time.Time {
	for _, en := range entries {
		if en.Method == method && en.Volume == ext && en.Result == "ok" && (node == "" || en.Node == node) {
			return en.Time
		}
	}
	return time.Time{}
}

func nlCount(entries []hostdir.AuditEntry, method, ext string) int {
	n := 0
	for _, en := range entries {
		if en.Method == method && en.Volume == ext {
			n++
		}
	}
	return n
}
