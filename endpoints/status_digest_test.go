package endpoints

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// gatedFSM is the real state machine, except that Apply of one chosen
// index waits until the test lets it go: a server whose FSM goroutine is
// behind Raft, as a restarted server replaying its log is for seconds.
type gatedFSM struct {
	*fsm.FSM
	hold    atomic.Uint64
	entered chan struct{}
	release chan struct{}
}

func (g *gatedFSM) Apply(l *raft.Log) any {
	if l.Index == g.hold.Load() {
		close(g.entered)
		<-g.release
	}
	return g.FSM.Apply(l)
}

// raftReader is the Reader of a server whose FSM is f.
type raftReader struct{ f *fsm.FSM }

func (r raftReader) State() *fsm.StateStore     { return r.f.State() }
func (r raftReader) FSM() *fsm.FSM              { return r.f }
func (r raftReader) WaitConsistentReads() error { return nil }
func (r raftReader) BarrierPending() bool       { return false }

// raftCluster is fakeCluster with a real Raft node.
type raftCluster struct {
	fakeCluster
	r *raft.Raft
}

func (c *raftCluster) Raft() *raft.Raft { return c.r }

// Issue 37: a chaos run reported "state digests differ at applied index
// 63497" for a server that had just been restarted. Raft counts an entry
// applied once it has queued it for the FSM goroutine (up to 128 batches
// of 256 entries), so a digest that took its index from Raft hashed an
// older state under a newer index. Here the FSM of a real single-server
// Raft is held before one entry while Raft has already counted it
// applied: the digest must name the index of the state it hashed, which
// is checked by replaying the Raft log up to that index into a fresh
// state machine and hashing that.
func TestStatusStateDigest_NamesTheIndexOfTheStateItHashedWhileTheFSMLags(t *testing.T) {
	g := &gatedFSM{FSM: fsm.New(nil), entered: make(chan struct{}), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(g.release)
		}
	}()
	conf := raft.DefaultConfig()
	conf.LocalID = "s1"
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout, conf.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
	conf.LeaderLeaseTimeout, conf.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
	logs := raft.NewInmemStore()
	_, trans := raft.NewInmemTransport("s1")
	r, err := raft.NewRaft(conf, g, logs, logs, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "s1", Address: trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() error {
		if r.State() != raft.Leader {
			return fmt.Errorf("raft state exp: leader got: %s", r.State())
		}
		return nil
	})
	register := func(id string) raft.ApplyFuture {
		buf, err := structs.Encode(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{
			ID: id, ExternalID: id, PluginID: "p", AccessMode: structs.AccessModeSingleNodeWriter,
			AttachmentMode: structs.AttachmentModeFilesystem}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Apply(buf, 5*time.Second)
	}
	for _, id := range []string{"v1", "v2", "v3"} {
		if err := register(id).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// The next entry: Raft commits it and counts it applied, while the FSM
	// waits before applying it.
	held := r.LastIndex() + 1
	g.hold.Store(held)
	pending := register("v4")
	<-g.entered
	waitUntil(t, 10*time.Second, func() error {
		if got := r.AppliedIndex(); got < held {
			return fmt.Errorf("raft applied index exp: >= %d got: %d", held, got)
		}
		return nil
	})

	deps := &Deps{Reader: raftReader{g.FSM}, Cluster: &raftCluster{r: r}, Tokens: NewTokenResolver(),
		Security: &SecurityCounters{}, Logger: hclog.NewNullLogger()}
	status := Receivers(deps, ConnInfo{Role: tlsutil.RoleCLI, TLS: true, ServerTLS: true, Remote: "127.0.0.9:1234"})["Status"].(*Status)
	var d structs.StateDigest
	if err := status.StateDigest(&structs.EmptyArgs{}, &d); err != nil {
		t.Fatal(err)
	}
	if d.AppliedIndex == 0 || d.SHA256 == "" {
		t.Fatalf("digest while the FSM lags exp: an index and a hash got: %+v", d)
	}
	if want := replayDigest(t, logs, d.AppliedIndex); d.SHA256 != want {
		t.Fatalf("digest at index %d exp: %.12s (the log replayed to %d) got: %.12s (Raft's applied index %d, FSM held before %d)",
			d.AppliedIndex, want, d.AppliedIndex, d.SHA256, r.AppliedIndex(), held)
	}

	// Once the FSM catches up, the digest names the held entry's write.
	close(g.release)
	released = true
	if err := pending.Error(); err != nil {
		t.Fatal(err)
	}
	if err := status.StateDigest(&structs.EmptyArgs{}, &d); err != nil {
		t.Fatal(err)
	}
	if d.AppliedIndex != held || d.SHA256 != replayDigest(t, logs, held) {
		t.Fatalf("digest after the FSM caught up exp: index %d, the log replayed to it got: %+v", held, d)
	}
}

// replayDigest applies the Raft log's commands up to index to a fresh
// state machine and hashes its state as the digest does.
func replayDigest(t *testing.T, logs raft.LogStore, index uint64) string {
	t.Helper()
	f := fsm.New(nil)
	first, err := logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i <= index; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
		if l.Type == raft.LogCommand {
			f.Apply(&l)
		}
	}
	var buf bytes.Buffer
	if err := f.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

func waitUntil(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %s: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
