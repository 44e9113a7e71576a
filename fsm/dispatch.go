package fsm

import (
	"fmt"
	"time"

	"github.com/claimd/claimd/structs"
)

// CorruptEntryError is the panic value for a log entry that cannot be
// applied: empty, of an unknown type without the ignore flag, or with a
// body that does not decode. Skipping such an entry would let this server's
// state silently diverge from the others', so the only safe move is to
// stop. It is the one panic Apply makes on purpose.
type CorruptEntryError struct {
	Index uint64
	Type  structs.MessageType
	Err   error
}

func (e *CorruptEntryError) Error() string {
	return fmt.Sprintf("fsm: corrupt log entry at index %d (type %d): %v", e.Index, e.Type, e.Err)
}

func (e *CorruptEntryError) Unwrap() error { return e.Err }

// command applies one decoded entry body at a Raft index.
type command func(s *StateStore, index uint64, at time.Time, body []byte) any

// commands is the dispatch table, filled by registerCommand from the init
// functions of the apply_*.go files (Consul's pattern): adding an entry
// type is adding a file, not editing a switch.
var commands = map[structs.MessageType]command{}

// registerCommand adds a handler for an entry type. The handler receives
// the decoded request and the entry's write transaction; it returns a
// response (may be nil) or a refusal. On refusal nothing it wrote is
// committed, so a refused entry changes nothing.
func registerCommand[T any](t structs.MessageType, apply func(tx *txn, req *T) (any, error)) {
	if _, dup := commands[t]; dup {
		panic(fmt.Sprintf("fsm: command for message type %d registered twice", t))
	}
	if t&structs.IgnoreUnknownTypeFlag != 0 {
		panic(fmt.Sprintf("fsm: message type %d has the ignore flag set", t))
	}
	commands[t] = func(s *StateStore, index uint64, at time.Time, body []byte) any {
		req := new(T)
		if err := structs.Decode(body, req); err != nil {
			panic(&CorruptEntryError{Index: index, Type: t, Err: fmt.Errorf("decode %T: %w", req, err)})
		}
		tx := s.writeTxn(index)
		tx.at = at
		// Abort after Commit is a no-op; without it a panic in a handler
		// would leave memdb's writer lock held.
		defer tx.Abort()
		resp, err := apply(tx, req)
		if err != nil {
			return err
		}
		tx.commit()
		return resp
	}
}

// apply is Apply without Raft: tests and benchmarks drive it directly.
func (f *FSM) apply(index uint64, data []byte) any { return f.applyAt(index, time.Time{}, data) }

// applyAt applies an entry appended by the leader at a time (claim steps
// record it).
func (f *FSM) applyAt(index uint64, at time.Time, data []byte) any {
	if len(data) == 0 {
		panic(&CorruptEntryError{Index: index, Err: fmt.Errorf("empty entry")})
	}
	t := structs.MessageType(data[0])
	ignorable := t&structs.IgnoreUnknownTypeFlag != 0
	cmd, ok := commands[t&^structs.IgnoreUnknownTypeFlag]
	if !ok {
		if ignorable {
			// A newer server wrote it and marked it safe to skip.
			f.logger.Warn("skipping unknown log entry type", "type", t, "index", index)
			return nil
		}
		panic(&CorruptEntryError{Index: index, Type: t, Err: fmt.Errorf("unknown message type")})
	}
	return cmd(f.State(), index, at, data[1:])
}
