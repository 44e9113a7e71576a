// Package fsmtest runs the real state machine without Raft or a network,
// for unit tests of the packages above it (the release watcher, the
// attachment keeper): entries are encoded as the servers encode them and
// applied in order, each at the next index.
package fsmtest

import (
	"bytes"
	"github.com/claimd/claimd/leaderlease"
	"io"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Local applies entries straight to a real FSM. It is a StateSource and an
// Applier as the server is.
type Local struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
}

// New makes an empty state machine.
func New() *Local { return &Local{f: fsm.New(nil)} }

// FSM is the state machine itself.
func (l *Local) FSM() *fsm.FSM { return l.f }

// State is the current state store.
func (l *Local) State() *fsm.StateStore { return l.f.State() }

// Apply encodes and applies one entry; a refusal is the error.
func (l *Local) Apply(t structs.MessageType, msg any) (any, uint64, error) {
	buf, err := structs.Encode(t, msg)
	if err != nil {
		return nil, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	resp := l.f.Apply(&raft.Log{Index: l.index, Data: buf})
	if err, ok := resp.(error); ok {
		return nil, l.index, err
	}
	return resp, l.index, nil
}

// Checkpoint applies one checkpoint as a batch of one, as the server's
// batcher would.
func (l *Local) Checkpoint(req *structs.ClaimCheckpointRequest) (*structs.ClaimCheckpointResponse, uint64, error) {
	raw, index, err := l.Apply(structs.CheckpointBatchRequestType, &structs.CheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{req}})
	if err != nil {
		return nil, index, err
	}
	res := raw.(*structs.CheckpointBatchResponse).Results[0]
	if err := res.Err(); err != nil {
		return nil, index, err
	}
	return &structs.ClaimCheckpointResponse{Claim: res.Claim}, index, nil
}

// Must applies an entry the test expects to be accepted.
func (l *Local) Must(t testing.TB, mt structs.MessageType, msg any) any {
	t.Helper()
	resp, _, err := l.Apply(mt, msg)
	if err != nil {
		t.Fatalf("apply %d: %v", mt, err)
	}
	return resp
}

// RestoreFrom replaces l's state with a snapshot of other's, as a follower
// installing the leader's snapshot does.
func (l *Local) RestoreFrom(other *Local) error {
	other.mu.Lock()
	snap, err := other.f.Snapshot()
	other.mu.Unlock()
	if err != nil {
		return err
	}
	var sink bufferSink
	if err := snap.Persist(&sink); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Restore(io.NopCloser(&sink))
}

// bufferSink is a raft.SnapshotSink in memory.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) ID() string    { return "fsmtest" }
func (*bufferSink) Cancel() error { return nil }
func (*bufferSink) Close() error  { return nil }

// HeldLease is a storage lease held for good: the one leader of a test
// without Raft, past its hold-off, whose every confirmation succeeds.
func HeldLease() *leaderlease.Lease {
	l := leaderlease.New(0, func() error { return nil })
	l.Won()
	l.WaiveHoldoff()
	return l
}
