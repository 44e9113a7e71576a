package fsm

import (
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/go-memdb"
)

// StateStore is the replicated state: one go-memdb database. Reads may run
// from any goroutine at any time, concurrently with Apply; they see a
// consistent committed view. Objects they return are shared with the store
// and must never be modified: Copy them first.
//
// A store is replaced, never emptied, by Restore: readers that hold the old
// one keep a consistent (stale) view, and its AbandonCh closes so blocking
// queries re-run against the new one.
type StateStore struct {
	db        *memdb.MemDB
	abandonCh chan struct{}
}

func newStateStore() *StateStore {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		// The schema is a constant of this package: an error is a bug.
		panic(fmt.Sprintf("fsm: invalid memdb schema: %v", err))
	}
	return &StateStore{db: db, abandonCh: make(chan struct{})}
}

// Snapshot returns a view of the store frozen now (memdb snapshots are
// O(1): they share the immutable trees). Every read from it, rows and
// table indexes alike, sees the same moment, its watch channels fire on
// the live store's writes, and it shares the live store's AbandonCh.
// Blocking queries read from one: reading rows and then the table index
// from the live store could answer with the index of a write the rows did
// not show, and the caller's next query (MinQueryIndex at that index) then
// slept through it until the next write or its MaxQueryTime.
func (s *StateStore) Snapshot() *StateStore {
	return &StateStore{db: s.db.Snapshot(), abandonCh: s.abandonCh}
}

// AbandonCh is closed when a Restore replaces this store. Every read adds
// it to the caller's WatchSet, so a blocking query wakes up and re-reads
// from FSM.State().
func (s *StateStore) AbandonCh() <-chan struct{} { return s.abandonCh }

func (s *StateStore) abandon() { close(s.abandonCh) }

// TableIndex returns the Raft index of the last write to a table, 0 when
// it was never written.
func (s *StateStore) TableIndex(table string) uint64 {
	raw, err := s.db.Txn(false).First(TableIndexes, indexID, table)
	if err != nil || raw == nil {
		return 0
	}
	return raw.(*IndexEntry).Value
}

// LatestIndex returns the Raft index of the last write to any table.
func (s *StateStore) LatestIndex() uint64 {
	it, err := s.db.Txn(false).Get(TableIndexes, indexID)
	if err != nil {
		return 0
	}
	var max uint64
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if v := raw.(*IndexEntry).Value; v > max {
			max = v
		}
	}
	return max
}

// watch adds ch and the store's abandon channel to ws (which may be nil).
func (s *StateStore) watch(ws memdb.WatchSet, ch <-chan struct{}) {
	if ws == nil {
		return
	}
	ws.Add(ch)
	ws.Add(s.abandonCh)
}

// first reads one row by index; missing is nil, nil.
func (s *StateStore) first(ws memdb.WatchSet, table, index string, arg string) (any, error) {
	ch, raw, err := s.db.Txn(false).FirstWatch(table, index, arg)
	if err != nil {
		return nil, fmt.Errorf("read %s by %s: %w", table, index, err)
	}
	s.watch(ws, ch)
	return raw, nil
}

// list reads every row of a table (args empty) or of one index value. The
// id index is ordered, and memdb appends the primary key to non-unique
// index keys, so both come out sorted by ID.
func (s *StateStore) list(ws memdb.WatchSet, table, index string, args ...any) ([]any, error) {
	it, err := s.db.Txn(false).Get(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s by %s: %w", table, index, err)
	}
	s.watch(ws, it.WatchCh())
	var out []any
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw)
	}
	return out, nil
}

func listAs[T any](raws []any, err error) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	out := make([]*T, len(raws))
	for i, raw := range raws {
		out[i] = raw.(*T)
	}
	return out, nil
}

func firstAs[T any](raw any, err error) (*T, error) {
	if err != nil || raw == nil {
		return nil, err
	}
	return raw.(*T), nil
}

// txn is the one write transaction of a log entry. Its index is the entry's
// Raft index: every object written gets it as ModifyIndex (and, when new,
// CreateIndex), and every table written gets it in the index table.
type txn struct {
	*memdb.Txn
	index uint64
	// at is when the leader appended the entry (zero without Raft).
	at      time.Time
	touched map[string]bool
}

func (s *StateStore) writeTxn(index uint64) *txn {
	return &txn{Txn: s.db.Txn(true), index: index, touched: map[string]bool{}}
}

// put inserts or replaces a row. The caller has set the object's indexes;
// the object must be a fresh copy nobody else holds.
func (tx *txn) put(table string, obj any) {
	if err := tx.Insert(table, obj); err != nil {
		// Only a schema/object mismatch can fail an insert: a bug.
		panic(fmt.Sprintf("fsm: insert into %s: %v", table, err))
	}
	tx.touched[table] = true
}

// remove deletes a row that exists.
func (tx *txn) remove(table string, obj any) {
	if err := tx.Delete(table, obj); err != nil {
		panic(fmt.Sprintf("fsm: delete from %s: %v", table, err))
	}
	tx.touched[table] = true
}

// get reads one row inside the transaction (seeing its own writes).
func (tx *txn) get(table, index, arg string) any {
	raw, err := tx.First(table, index, arg)
	if err != nil {
		panic(fmt.Sprintf("fsm: read %s by %s: %v", table, index, err))
	}
	return raw
}

// all reads rows inside the transaction, in index order.
func (tx *txn) all(table, index string, args ...any) []any {
	it, err := tx.Get(table, index, args...)
	if err != nil {
		panic(fmt.Sprintf("fsm: list %s by %s: %v", table, index, err))
	}
	var out []any
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw)
	}
	return out
}

// commit writes the index table for every touched table, then commits.
func (tx *txn) commit() {
	tables := make([]string, 0, len(tx.touched))
	for t := range tx.touched {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		if err := tx.Insert(TableIndexes, &IndexEntry{Key: t, Value: tx.index}); err != nil {
			panic(fmt.Sprintf("fsm: update index table: %v", err))
		}
	}
	tx.Commit()
}
