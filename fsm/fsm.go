package fsm

import (
	"io"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// FSM is the bridge between hashicorp/raft and the state store. It holds
// no logic of its own beyond picking the handler for an entry: see doc.go.
//
// Concurrency: raft calls Apply, Snapshot and Restore from its one FSM
// goroutine, never at the same time; FSMSnapshot.Persist runs on another
// goroutine while Apply goes on. State may be called from any goroutine.
type FSM struct {
	logger hclog.Logger
	// state is swapped whole by Restore; readers load it without a lock.
	state atomic.Pointer[StateStore]
}

// New returns an FSM with an empty state.
func New(logger hclog.Logger) *FSM {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	f := &FSM{logger: logger}
	f.state.Store(newStateStore())
	return f
}

// State returns the current state store. Hold it for one read (or one
// blocking-query round): after a Restore it is a stale, abandoned store.
func (f *FSM) State() *StateStore { return f.state.Load() }

// Apply applies one committed log entry. It returns nil, an error value for
// a refused request, or a typed response; it panics only on an entry it
// cannot decode or does not know (see CorruptEntryError).
func (f *FSM) Apply(l *raft.Log) any { return f.applyAt(l.Index, l.AppendedAt, l.Data) }

// Snapshot captures the state as of the last applied entry. It is cheap (a
// memdb read transaction); the encoding happens in Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) { return newSnapshot(f.State()), nil }

// Restore replaces the whole state with a snapshot's. The new store is
// built aside and swapped in only when complete, so a bad snapshot leaves
// the old state in place.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := restoreStore(rc)
	if err != nil {
		return err
	}
	old := f.state.Swap(s)
	old.abandon()
	return nil
}

var _ raft.FSM = (*FSM)(nil)
