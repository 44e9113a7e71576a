package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// holderDetachFrom is the last build before a release could carry the
// holding node's "I node-detached it" (AllocClientUpdate.DetachedVolumes,
// entry types 29 and 30): its servers know neither the field nor the types.
const holderDetachFrom = "7c013591927706f1bcc562e2e9b73aa72c5e12f6"

// corruptEntry is what a server that cannot apply a log entry panics with
// (fsm.CorruptEntryError).
var corruptEntry = regexp.MustCompile(`fsm: corrupt log entry at index (\d+) \(type (\d+)\): unknown message type`)

// TestUpgrade_HolderDetachWaitsForEveryServer: the agent's statement that
// it node-detached a stopping allocation's volumes is honoured only in
// entry types every server applies. A secured cluster of two servers of
// this build and one of holderDetachFrom, and a client agent of this build
// (its hostdir plugin mounts for real) under a claim workload:
//
//   - while the old server is a member, every release goes the servers'
//     way (the leader strips the statement and writes type 8: the release
//     watcher sends the agent a NodeDetachVolume, a checkpoint frees the
//     claim), and the three servers' state digests are equal;
//   - once it is replaced by this build (a second workload runs through
//     the replacement), the leader's next health round opens the gate:
//     releases are node-detached in the release entry (type 30; the
//     watcher then only controller-detaches and frees), the agent gets no
//     NodeDetachVolume, digests stay equal, every acknowledged stop is
//     kept and every stopped allocation's claim is freed;
//   - a server of the old build that joins afterwards stops at the first
//     type-30 entry (a panic naming it), and again at the same entry when
//     restarted on that build, never applying it differently; while it is
//     a member the gate is closed again; started on this build on the same
//     data dir it catches up, the four digests agree and the gate reopens.
//
// Run time: about 20-30 s with -race on a busy 2-core machine, of which
// 8-20 s build the old commit when the Go build cache does not hold it
// yet (buildAt builds with -trimpath, so a later run links it from the
// cache in about 1.5 s).
func TestUpgrade_HolderDetachWaitsForEveryServer(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	began := time.Now()
	old := buildAt(t, holderDetachFrom)
	const oldSrv = 2 // s3
	e := startMixedCluster(t, []string{"", "", old}, []int{0, 1})

	// The gate is the leader's: with the old server leading, its own
	// build writes type 8 whatever the agent says, and nothing would be
	// tested. Move leadership to a server of this build.
	harness.WaitFor(t, 60*time.Second, func() error {
		switch li := e.leaderIndex(t); li {
		case -1:
			return fmt.Errorf("no leader yet")
		case oldSrv:
			var to string
			for _, s := range e.raftServers(t) {
				if s.Address == e.addrs[0] {
					to = s.ID
				}
			}
			err := e.c.TransferLeadership(harness.Ctx(t, 15*time.Second), to)
			return fmt.Errorf("leader exp: a server of this build got: %s (transfer: %v)", e.servers[li].Name, err)
		}
		return nil
	})
	e.waitHealthy(t, 3)
	const nVols = 3
	var bgVols []string
	for i := range 2 * nVols {
		id := fmt.Sprintf("hd%d", i)
		if i >= nVols {
			id = fmt.Sprintf("bg%d", i-nVols)
			bgVols = append(bgVols, id)
		}
		harness.WaitFor(t, 30*time.Second, func() error {
			_, err := e.c.RegisterVolumes(harness.Ctx(t, 15*time.Second), &structs.Volume{ID: id, ExternalID: id, PluginID: "hostdir",
				AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem})
			return err
		})
	}
	var all []release
	n := 0
	cycle := func(stage string) release {
		t.Helper()
		r := e.cycle(t, fmt.Sprintf("%s%03d", stage, n), fmt.Sprintf("hd%d", n%nVols))
		n++
		all = append(all, r)
		return r
	}
	lastFreed := func() uint64 {
		var last uint64
		for _, r := range all {
			last = max(last, r.freedAt)
		}
		return last
	}

	// (a) An old server is a member: the statement is stripped.
	stageA := time.Now()
	for range 6 {
		r := cycle("a")
		if r.byHolder || r.serverDetaches == 0 {
			t.Errorf("with a server of %s in the cluster, release exp: the servers' node detach got: %s", holderDetachFrom[:7], r)
		}
	}
	idx, sha := e.digests(t, []int{0, 1, 2}, lastFreed())
	t.Logf("(a) e.g. %s", all[len(all)-1])
	t.Logf("(a) mixed cluster: 6 releases the servers' way; s1-s3 hash %.12s at index %d (leader %s) [%s]",
		sha, idx, e.servers[e.leaderIndex(t)].Name, time.Since(stageA).Round(time.Millisecond))

	// (b) The old server is replaced by this build, under a workload of
	// its own that goes on through the replacement: the gate opens.
	stageB := time.Now()
	bg := e.startBackground("g", bgVols)
	harness.WaitFor(t, 30*time.Second, func() error {
		if n := bg.count(); n < 2 {
			return fmt.Errorf("background workload exp: 2 cycles got: %d", n)
		}
		return nil
	})
	// The releases finished by now were written while s3 ran the old build.
	beforeReplace := bg.count()
	if err := e.servers[oldSrv].Replace("", 30*time.Second); err != nil {
		t.Logf("replacing s3: %v", err)
	}
	term := e.waitHealthy(t, 3)
	healthy := time.Now()
	probes := 0
	var first release
	harness.WaitFor(t, 30*time.Second, func() error {
		probes++
		if first = cycle("b"); !first.byHolder {
			return fmt.Errorf("release after the upgrade exp: node-detached in the release entry got: %s", first)
		}
		return nil
	})
	t.Logf("(b) gate open %s after s3 was healthy again, at the %d. release after it", time.Since(healthy).Round(time.Millisecond), probes)
	for range 6 {
		r := cycle("b")
		if !r.byHolder || r.serverDetaches != 0 {
			// A new leader opens the gate only after its first health
			// round: an election would explain one release the servers' way.
			if now := e.waitHealthy(t, 3); now == term {
				t.Errorf("every server of this build, release exp: node-detached in the release entry, no server NodeDetach got: %s (term %d)", r, now)
			}
		}
	}
	t.Logf("(b) e.g. %s", all[len(all)-1])
	bgDone := bg.count()
	harness.WaitFor(t, 60*time.Second, func() error {
		if n := bg.count(); n < bgDone+3 {
			return fmt.Errorf("background workload exp: %d cycles got: %d", bgDone+3, n)
		}
		return nil
	})
	bgRs := bg.wait(t)
	var bgHolder, bgOld int
	for i, r := range bgRs {
		if i < beforeReplace {
			bgOld++
			if r.byHolder || r.serverDetaches == 0 {
				t.Errorf("released before s3 was replaced, exp: the servers' node detach got: %s", r)
			}
		}
		if r.byHolder {
			bgHolder++
		}
	}
	if bgHolder == 0 {
		t.Errorf("background workload exp: releases node-detached in their entry once the gate opened got: none of %d", len(bgRs))
	}
	all = append(all, bgRs...)
	t.Logf("(b) background workload through the replacement: %d releases, the %d before it the servers' way, %d node-detached in their entry",
		len(bgRs), bgOld, bgHolder)
	idx, sha = e.digests(t, []int{0, 1, 2}, lastFreed())
	e.checkAcknowledged(t, all)
	t.Logf("(b) upgraded: s1-s3 hash %.12s at index %d; %d releases, every claim freed [%s]", sha, idx, len(all), time.Since(stageB).Round(time.Millisecond))

	// (c) A server of the old build joins now: it stops at the first
	// type-30 entry.
	stageC := time.Now()
	addr := harness.FreeAddr(t)
	e.addrs = append(e.addrs, addr)
	s4 := harness.StartProcessWith(t, old, "s4", append([]string{"agent", "-server", "-data-dir", filepath.Join(e.dir, "s4"),
		"-bind", addr, "-join", strings.Join(e.addrs[:3], ","), "-node-name", "s4", "-raft-multiplier", "0.2", "-storage-lease", mixedStorageLease}, e.serverCert(t)...)...)
	e.servers = append(e.servers, s4)
	harness.WaitFor(t, 60*time.Second, func() error {
		if !s4.Exited() {
			return fmt.Errorf("s4 (%s) exp: stopped at a type-30 entry got: running", holderDetachFrom[:7])
		}
		return nil
	})
	m := corruptEntry.FindStringSubmatch(s4.Output())
	// The first type-30 entry is the earliest release the node vouched
	// for, of either workload.
	var earliest uint64
	for _, r := range all {
		if u := stepIndex(r.claim, structs.ClaimStateUnpublishing); r.byHolder && (earliest == 0 || u < earliest) {
			earliest = u
		}
	}
	firstType30 := fmt.Sprint(earliest)
	if m == nil || m[2] != "30" || m[1] != firstType30 {
		t.Fatalf("s4 exp: panic at the first type-30 entry (index %s) got: %v; output ends: %s", firstType30, m, tail(s4.Output(), 2000))
	}
	out := s4.Output()
	if i := strings.Index(out, "panic:"); i >= 0 {
		out = out[i:]
	}
	t.Logf("(c) s4 (%s) stopped; its output from the panic on:\n%s", holderDetachFrom[:7], strings.Join(strings.SplitN(out, "\n", 6)[:5], "\n"))
	// Started again on the old build (a service manager's restart), it
	// stops at the same entry: deterministic, never applied.
	s4.Restart()
	harness.WaitFor(t, 60*time.Second, func() error {
		if !s4.Exited() {
			return fmt.Errorf("s4 restarted on %s exp: stopped again got: running", holderDetachFrom[:7])
		}
		return nil
	})
	if again := corruptEntry.FindStringSubmatch(s4.Output()); again == nil || again[0] != m[0] {
		t.Fatalf("s4 restarted on %s exp: %q again got: %v; output ends: %s", holderDetachFrom[:7], m[0], again, tail(s4.Output(), 2000))
	}
	members := e.raftServers(t)
	if len(members) != 4 {
		t.Fatalf("raft configuration exp: s4 a member got: %+v", members)
	}
	// What an operator sees besides s4's own panic: `operator raft
	// health` lists s4 as not healthy (and exits non-zero) once the
	// leader's health round has taken it in.
	harness.WaitFor(t, 30*time.Second, func() error {
		h, err := e.c.RaftHealth(harness.Ctx(t, 15*time.Second))
		if err != nil {
			return err
		}
		for _, s := range h.Servers {
			if s.Address == addr && !s.Healthy && !h.Healthy {
				t.Logf("(c) raft health: cluster healthy=%v failure tolerance=%d; s4 status=%s healthy=%v voter=%v lag=%d version=%q",
					h.Healthy, h.FailureTolerance, s.Status, s.Healthy, s.Voter, s.IndexLag, s.Version)
				return nil
			}
		}
		return fmt.Errorf("raft health exp: s4 listed, not healthy got: %+v", h)
	})
	// A member that never reported the feature closes the gate again.
	if r := cycle("c"); r.byHolder || r.serverDetaches == 0 {
		t.Errorf("with s4 (%s) a member, release exp: the servers' node detach got: %s", holderDetachFrom[:7], r)
	}
	e.digests(t, []int{0, 1, 2}, lastFreed())
	// The operator's way out: this build on the same data dir.
	if err := s4.Replace("", 30*time.Second); err != nil {
		t.Logf("replacing s4: %v", err)
	}
	e.waitHealthy(t, 4)
	harness.WaitFor(t, 30*time.Second, func() error {
		if r := cycle("c"); !r.byHolder {
			return fmt.Errorf("with s4 upgraded, release exp: node-detached in the release entry got: %s", r)
		}
		return nil
	})
	idx, sha = e.digests(t, []int{0, 1, 2, 3}, lastFreed())
	e.checkAcknowledged(t, all)
	t.Logf("(c) s4 on this build: s1-s4 hash %.12s at index %d [%s]; %d releases in all, test %s",
		sha, idx, time.Since(stageC).Round(time.Millisecond), len(all), time.Since(began).Round(time.Millisecond))
}

// checkAcknowledged checks that every allocation the workload placed and
// stopped is kept as stopped and complete, and that no volume holds a
// claim (every release was freed).
func (e *mixedEnv) checkAcknowledged(t *testing.T, rs []release) {
	t.Helper()
	vols := map[string]bool{}
	for _, r := range rs {
		vols[r.volume] = true
		a, _, err := e.c.Alloc(harness.Ctx(t, 15*time.Second), r.alloc, structs.QueryOptions{})
		if err != nil || a == nil || a.DesiredStatus != structs.AllocDesiredStop || a.ClientStatus != structs.AllocClientComplete {
			t.Errorf("acknowledged stop of %s exp: kept, complete got: %+v (%v)", r.alloc, a, err)
		}
	}
	for v := range vols {
		got, _, err := e.c.Volume(harness.Ctx(t, 15*time.Second), v, structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if all := got.AllClaims(); len(all) != 0 {
			t.Errorf("volume %s exp: every claim freed got: %s", v, describeClaims(all))
		}
	}
}
