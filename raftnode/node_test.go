package raftnode

import (
	"io"
	"net"
	"testing"

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
