package raftnode

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// nopFSM is enough for wiring tests: this package knows nothing of claims.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, io.EOF }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

func mustNewNode(t *testing.T, dir string) *Node {
	t.Helper()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	n, err := New(Config{ID: "a", DataDir: dir, Multiplier: 0.2, Stream: NewStreamLayer(addr, nil), FSM: nopFSM{}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNode_RestartedOnItsDataDirNeverBootstrapsAgain(t *testing.T) {
	dir := t.TempDir()
	n := mustNewNode(t, dir)
	if n.HadState() {
		t.Fatal("fresh data dir exp: no state got: state")
	}
	if err := n.Bootstrap([]raft.Server{{ID: "a", Address: "127.0.0.1:1"}}); err != nil {
		t.Fatalf("first bootstrap exp: ok got: %v", err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	n = mustNewNode(t, dir)
	defer n.Shutdown()
	if !n.HadState() {
		t.Fatal("restarted node exp: found its state got: empty")
	}
	if err := n.Bootstrap([]raft.Server{{ID: "a", Address: "127.0.0.1:1"}}); err == nil {
		t.Fatal("bootstrap of a node with state exp: refused got: accepted")
	}
}

// A second process on the same data dir gets an error that says so, not a
// start that hangs on raft.db's lock (bolt waits forever by default).
func TestNode_SecondOpenOfADataDirFailsClearly(t *testing.T) {
	dir := t.TempDir()
	n := mustNewNode(t, dir)
	defer n.Shutdown()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	done := make(chan error, 1)
	go func() {
		_, err := New(Config{ID: "b", DataDir: dir, Multiplier: 0.2, Stream: NewStreamLayer(addr, nil), FSM: nopFSM{}})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("second open exp: locked by another process, naming %s got: %v", dir, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("second open exp: an error got: still waiting after 30s")
	}
}

// The log store does not persist bolt's freelist (openLogStore): a log
// that was compacted, closed and reopened keeps what it held and takes new
// entries into the pages compaction freed.
func TestLogStore_CompactedLogReopensIntact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	store, err := openLogStore(path)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 600)
	write := func(from, to uint64) {
		t.Helper()
		var logs []*raft.Log
		for i := from; i <= to; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: 1, Data: data})
		}
		if err := store.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint64(1); i <= 3000; i += 500 {
		write(i, i+499)
	}
	if err := store.DeleteRange(1, 2000); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if store, err = openLogStore(path); err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	write(3001, 4000)
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	if first != 2001 || last != 4000 {
		t.Fatalf("log after compaction, reopen and append exp: 2001..4000 got: %d..%d", first, last)
	}
	for _, i := range []uint64{2001, 3000, 3001, 4000} {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, data) {
			t.Fatalf("entry %d exp: intact got: %v (%d bytes)", i, err, len(l.Data))
		}
	}
}
