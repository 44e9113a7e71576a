package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
)

// Snapshot format, version 1: a stream of msgpack values, all written by
// one encoder so nothing is buffered between raw writes and codec writes:
//
//	header{Magic, Version}
//	(kind uint8, object)*   kinds in table order, objects in ID order
//	kindEnd
//
// except that each volume's evals follow the volume itself (they live in
// its row, decision 41): restore attaches them as they come. A snapshot
// written before that has all evals after all volumes, in ID order, and
// restores the same state.
//
// The explicit end record makes a truncated snapshot an error instead of a
// smaller state. Restore refuses versions it does not know.
const (
	snapshotMagic   = "claimd-fsm"
	snapshotVersion = 1
)

type snapshotHeader struct {
	Magic   string
	Version int
}

type recordKind uint8

const (
	kindIndex  recordKind = 1
	kindNode   recordKind = 2
	kindPlugin recordKind = 3
	kindVolume recordKind = 4
	kindAlloc  recordKind = 5
	kindEval   recordKind = 6
	// ACL rows: a snapshot written before ACLs existed simply has none.
	kindACLPolicy recordKind = 7
	kindACLToken  recordKind = 8
	// Storage reports: a snapshot written before reconciliation has none.
	kindStorageReport recordKind = 9
	// Controller admissions: a snapshot written before them has none.
	kindControllerAdmission recordKind = 10
	// Node identities (issue 38): a snapshot written before them has
	// none, and nodes registered then get theirs when they are next
	// deregistered.
	kindNodeIdentity recordKind = 11
	kindEnd          recordKind = 255
)

// snapshotTables lists what a snapshot holds, in the order written.
var snapshotTables = []struct {
	table string
	kind  recordKind
	new   func() any
}{
	{TableIndexes, kindIndex, func() any { return new(IndexEntry) }},
	{TableNodes, kindNode, func() any { return new(structs.Node) }},
	// Before the plugins: restoring a plugin reads which of its
	// controllers are admitted.
	{TableControllerAdmissions, kindControllerAdmission, func() any { return new(structs.ControllerAdmission) }},
	{TablePlugins, kindPlugin, func() any { return new(structs.Plugin) }},
	{TableVolumes, kindVolume, func() any { return new(structs.Volume) }},
	{TableAllocs, kindAlloc, func() any { return new(structs.Alloc) }},
	{TableEvals, kindEval, func() any { return new(structs.Eval) }},
	{TableACLPolicies, kindACLPolicy, func() any { return new(structs.ACLPolicy) }},
	{TableACLTokens, kindACLToken, func() any { return new(structs.ACLToken) }},
	{TableStorageReports, kindStorageReport, func() any { return new(structs.StorageReport) }},
	{TableNodeIdentities, kindNodeIdentity, func() any { return new(structs.NodeIdentity) }},
}

// snapshotHandle is structs.MsgpackHandle plus Canonical: map keys are
// written sorted, so the same state always gives the same bytes. That is
// what lets tests prove S2 by comparing two servers' snapshots. Decoding
// uses the shared handle; canonical output is ordinary msgpack.
var snapshotHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.RawToString = true
	h.WriteExt = true
	h.MapType = reflect.TypeOf(map[string]any(nil))
	h.MaxInitLen = structs.MsgpackHandle.MaxInitLen
	h.Canonical = true
	return h
}()

// fsmSnapshot is a memdb read transaction: an immutable view that Apply
// cannot change, so Persist may take its time on another goroutine.
type fsmSnapshot struct {
	tx *memdb.Txn
}

func newSnapshot(s *StateStore) *fsmSnapshot {
	return &fsmSnapshot{tx: s.db.Txn(false)}
}

// Persist streams the snapshot to the sink; raft calls it off the FSM
// goroutine.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := codec.NewEncoder(bw, snapshotHandle)
	if err := enc.Encode(snapshotHeader{Magic: snapshotMagic, Version: snapshotVersion}); err != nil {
		return fmt.Errorf("snapshot header: %w", err)
	}
	for _, t := range snapshotTables {
		if t.kind == kindEval {
			continue // written with their volumes
		}
		it, err := s.tx.Get(t.table, indexID)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", t.table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			// Plugins are written as readers see them, instances
			// included: the format the snapshot always had.
			if r, ok := raw.(*pluginRow); ok {
				raw = r.plugin(s.tx, true)
			}
			if err := writeRecord(enc, t.kind, raw); err != nil {
				return fmt.Errorf("snapshot %s: %w", t.table, err)
			}
			v, ok := raw.(*structs.Volume)
			if !ok {
				continue
			}
			for _, e := range v.Evals {
				if err := writeRecord(enc, kindEval, e); err != nil {
					return fmt.Errorf("snapshot %s: %w", TableEvals, err)
				}
			}
		}
	}
	if err := enc.Encode(kindEnd); err != nil {
		return fmt.Errorf("snapshot end: %w", err)
	}
	return bw.Flush()
}

func writeRecord(enc *codec.Encoder, kind recordKind, obj any) error {
	if err := enc.Encode(kind); err != nil {
		return err
	}
	return enc.Encode(obj)
}

// Release is called when raft is done with the snapshot.
func (s *fsmSnapshot) Release() { s.tx.Abort() }

// restoreStore builds a new store from a snapshot stream, in one write
// transaction committed only when the end record has been read.
// restoreGCPercent is the collector's target during a restore.
const restoreGCPercent = 400

var relaxed struct {
	sync.Mutex
	n   int // restores running
	old int // the setting before the first of them
}

// relaxGC raises the GC target until the returned func is called; restores
// that overlap (several servers in one test process) share one raise.
func relaxGC() func() {
	relaxed.Lock()
	if relaxed.n == 0 {
		relaxed.old = debug.SetGCPercent(restoreGCPercent)
	}
	relaxed.n++
	relaxed.Unlock()
	return func() {
		relaxed.Lock()
		relaxed.n--
		if relaxed.n == 0 {
			debug.SetGCPercent(relaxed.old)
		}
		relaxed.Unlock()
	}
}

func restoreStore(r io.Reader) (*StateStore, error) {
	dec := codec.NewDecoder(bufio.NewReaderSize(r, 64<<10), structs.MsgpackHandle)
	if err := readSnapshotHeader(dec); err != nil {
		return nil, err
	}
	tables := make(map[recordKind]string, len(snapshotTables))
	news := make(map[recordKind]func() any, len(snapshotTables))
	for _, t := range snapshotTables {
		tables[t.kind], news[t.kind] = t.table, t.new
	}

	// Decoding and inserting each take about half the time: decode on
	// another goroutine so that the two overlap on a multi-core machine.
	type record struct {
		n     int
		table string
		obj   any
	}
	records := make(chan record, 1024)
	decodeErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(records)
		for n := 0; ; n++ {
			var kind recordKind
			if err := dec.Decode(&kind); err != nil {
				if errors.Is(err, io.EOF) {
					decodeErr <- fmt.Errorf("restore: truncated after %d records", n)
					return
				}
				decodeErr <- fmt.Errorf("restore: record %d kind: %w", n, err)
				return
			}
			if kind == kindEnd {
				decodeErr <- nil
				return
			}
			table, ok := tables[kind]
			if !ok {
				decodeErr <- fmt.Errorf("restore: record %d has unknown kind %d", n, kind)
				return
			}
			obj := news[kind]()
			if err := dec.Decode(obj); err != nil {
				decodeErr <- fmt.Errorf("restore: record %d (%s): %w", n, table, err)
				return
			}
			select {
			case records <- record{n: n, table: table, obj: obj}:
			case <-stop:
				return
			}
		}
	}()

	// A restore builds the whole heap from nothing, and the collector
	// would rescan it again and again as it grows (a fifth of the time at
	// 100k volumes). Let it grow further between collections while the
	// restore runs; a memory limit set by the operator still holds.
	defer relaxGC()()

	s := newStateStore()
	tx := s.db.Txn(true)
	defer tx.Abort()
	// A volume is inserted once the records after it are not its evals,
	// so that its evals join it before its one insert.
	var held *structs.Volume
	flush := func() error {
		if held == nil {
			return nil
		}
		v := held
		held = nil
		return tx.Insert(TableVolumes, v)
	}
	for r := range records {
		var err error
		switch obj := r.obj.(type) {
		case *structs.Plugin:
			err = flush()
			restorePlugin(tx, obj)
		case *structs.Volume:
			if err = flush(); err == nil {
				obj.Evals, held = nil, obj
			}
		case *structs.Eval:
			err = restoreEval(tx, held, obj)
		default:
			if err = flush(); err == nil {
				err = tx.Insert(r.table, r.obj)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("restore: record %d (%s): %w", r.n, r.table, err)
		}
	}
	if err := <-decodeErr; err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("restore: last volume: %w", err)
	}
	tx.Commit()
	return s, nil
}

// restoreEval puts a snapshot's eval into its volume: held, when it
// follows its volume, or the stored row, in a snapshot written before
// evals lived in volume rows. An eval whose volume is not in the snapshot
// (such snapshots kept the finished evals of deregistered volumes) is
// dropped: it has no row to live in and nothing to do.
func restoreEval(tx *memdb.Txn, held *structs.Volume, e *structs.Eval) error {
	if held != nil && held.ID == e.VolumeID {
		held.Evals = addEvalSorted(held.Evals, e)
		return nil
	}
	raw, err := tx.First(TableVolumes, indexID, e.VolumeID)
	if err != nil || raw == nil {
		return err
	}
	v := *raw.(*structs.Volume)
	v.Evals = addEvalSorted(v.Evals, e)
	return tx.Insert(TableVolumes, &v)
}

func addEvalSorted(evals []*structs.Eval, e *structs.Eval) []*structs.Eval {
	evals = append(slices.Clip(evals), e)
	slices.SortFunc(evals, compareEvals)
	return evals
}

// WriteSnapshot writes the current state in snapshot format to w. The bytes
// are canonical: two servers that applied the same log write the same
// bytes, which is how tests and operators compare servers (S2).
func (f *FSM) WriteSnapshot(w io.Writer) error {
	snap := newSnapshot(f.State())
	defer snap.Release()
	return snap.write(w)
}
