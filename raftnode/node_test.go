package raftnode

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// nopFSM is enough for wiring tests: this package knows nothing of claims.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, io.EOF }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

// stores are the log stores every store test runs on.
var stores = []string{LogStoreBoltDB, LogStoreWAL}

func mustNewNode(t *testing.T, dir string) *Node { return mustNewNodeStore(t, dir, "") }

func mustNewNodeStore(t *testing.T, dir, store string) *Node {
	t.Helper()
	n, err := newNodeStore(dir, "a", store)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newNodeStore(dir, id, store string) (*Node, error) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	return New(Config{ID: id, DataDir: dir, Multiplier: 0.2, Stream: NewStreamLayer(addr, nil), FSM: nopFSM{}, LogStore: store})
}

func TestNode_RestartedOnItsDataDirNeverBootstrapsAgain(t *testing.T) {
	for _, store := range stores {
		t.Run(store, func(t *testing.T) { testNeverBootstrapsAgain(t, store) })
	}
}

func testNeverBootstrapsAgain(t *testing.T, store string) {
	dir := t.TempDir()
	n := mustNewNodeStore(t, dir, store)
	if n.HadState() {
		t.Fatal("fresh data dir exp: no state got: state")
	}
	if err := n.Bootstrap([]raft.Server{{ID: "a", Address: "127.0.0.1:1"}}); err != nil {
		t.Fatalf("first bootstrap exp: ok got: %v", err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Restarted without naming a store: it keeps the one it was made with.
	n = mustNewNode(t, dir)
	defer n.Shutdown()
	if n.LogStore != store {
		t.Fatalf("restarted node's log store exp: %s (what the data dir holds) got: %s", store, n.LogStore)
	}
	if !n.HadState() {
		t.Fatal("restarted node exp: found its state got: empty")
	}
	if err := n.Bootstrap([]raft.Server{{ID: "a", Address: "127.0.0.1:1"}}); err == nil {
		t.Fatal("bootstrap of a node with state exp: refused got: accepted")
	}
}

// A second process on the same data dir gets an error that says so, not a
// start that hangs on the store's lock (bolt and raft-wal's meta database
// wait forever by default).
func TestNode_SecondOpenOfADataDirFailsClearly(t *testing.T) {
	for _, store := range stores {
		t.Run(store, func(t *testing.T) { testSecondOpen(t, store) })
	}
}

func testSecondOpen(t *testing.T, store string) {
	dir := t.TempDir()
	n := mustNewNodeStore(t, dir, store)
	defer n.Shutdown()
	done := make(chan error, 1)
	go func() {
		_, err := newNodeStore(dir, "b", store)
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

// A compacted log, closed and reopened, keeps what it held and takes new
// entries (for bolt: the store does not persist its freelist, so the
// pages compaction freed are found again by a scan on open).
func TestLogStore_CompactedLogReopensIntact(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			store := mustOpenStore(t, dir, kind)
			data := bytes.Repeat([]byte("x"), 600)
			for i := uint64(1); i <= 3000; i += 500 {
				writeLogs(t, store, i, i+499, data)
			}
			if err := store.DeleteRange(1, 2000); err != nil {
				t.Fatal(err)
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			store = mustOpenStore(t, dir, kind)
			defer store.Close()
			writeLogs(t, store, 3001, 4000, data)
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
		})
	}
}

// Decision 34's test: Raft truncates a follower's conflicting tail (a
// deposed leader's uncommitted entries) and appends the new leader's.
// raft-wal v0.4.0 sealed the tail segment without its index on that
// truncation and could not read the log after a reopen ("sealed segment
// has no index block"); v0.4.1 fixed it. Store 1-10, delete 6-10, store
// 6, close, reopen: every entry reads back.
func TestLogStore_TailTruncationSurvivesReopen(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			store := mustOpenStore(t, dir, kind)
			writeLogs(t, store, 1, 10, []byte("old"))
			if err := store.DeleteRange(6, 10); err != nil {
				t.Fatal(err)
			}
			writeLogs(t, store, 6, 6, []byte("new"))
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			store = mustOpenStore(t, dir, kind)
			defer store.Close()
			first, _ := store.FirstIndex()
			last, _ := store.LastIndex()
			if first != 1 || last != 6 {
				t.Fatalf("log after tail truncation and reopen exp: 1..6 got: %d..%d", first, last)
			}
			for i := uint64(1); i <= 6; i++ {
				want := "old"
				if i == 6 {
					want = "new"
				}
				var l raft.Log
				if err := store.GetLog(i, &l); err != nil || string(l.Data) != want {
					t.Fatalf("entry %d exp: %q got: %q %v", i, want, l.Data, err)
				}
			}
		})
	}
}

// A data dir keeps the store it was made with: asking for the other kind
// is refused with what it holds and how to move, and changes nothing.
func TestLogStore_OtherKindOfDataDirRefused(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			store := mustOpenStore(t, dir, kind)
			writeLogs(t, store, 1, 3, []byte("x"))
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			other := LogStoreWAL
			if kind == LogStoreWAL {
				other = LogStoreBoltDB
			}
			_, _, err := openStore(dir, other, 0, hclog.NewNullLogger())
			if err == nil || !strings.Contains(err.Error(), "holds a "+kind+" log") || !strings.Contains(err.Error(), "-raft-log-store "+kind) {
				t.Fatalf("opening a %s data dir as %s exp: refused, naming both got: %v", kind, other, err)
			}
			store = mustOpenStore(t, dir, "")
			defer store.Close()
			if last, _ := store.LastIndex(); last != 3 {
				t.Fatalf("log after the refused open exp: 1..3 kept got: last %d", last)
			}
		})
	}
	if err := ValidateLogStore("raft_log_store", "rocksdb"); err == nil || !strings.Contains(err.Error(), "raft_log_store") {
		t.Fatalf("unknown store exp: an error naming the field got: %v", err)
	}
}

func mustOpenStore(t *testing.T, dir, kind string) logStore {
	t.Helper()
	s, _, err := openStore(dir, kind, 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeLogs(t *testing.T, store logStore, from, to uint64, data []byte) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Data: data})
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

// A new data dir gets the default store; one made with boltdb before the
// default changed stays boltdb when no store is named.
func TestLogStore_NewDataDirGetsTheDefault(t *testing.T) {
	dir := t.TempDir()
	s, kind, err := openStore(dir, "", 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if kind != DefaultLogStore || DefaultLogStore != LogStoreWAL {
		t.Fatalf("new data dir's store exp: %s got: %s (default %s)", LogStoreWAL, kind, DefaultLogStore)
	}
	old := t.TempDir()
	s = mustOpenStore(t, old, LogStoreBoltDB)
	s.Close()
	if s, kind, err = openStore(old, "", 0, hclog.NewNullLogger()); err != nil || kind != LogStoreBoltDB {
		t.Fatalf("boltdb data dir opened without a store named exp: boltdb got: %s %v", kind, err)
	}
	s.Close()
}
