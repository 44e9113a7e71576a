package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
)

func mustPanicCorrupt(t *testing.T, f *FSM, data []byte) *CorruptEntryError {
	t.Helper()
	var got any
	func() {
		defer func() { got = recover() }()
		f.Apply(&raft.Log{Index: 7, Data: data})
	}()
	ce, ok := got.(*CorruptEntryError)
	if !ok {
		t.Fatalf("exp: *CorruptEntryError panic got: %#v", got)
	}
	return ce
}

func TestApply_CorruptEntriesPanic(t *testing.T) {
	f := New(nil)
	mustPanicCorrupt(t, f, nil)
	if ce := mustPanicCorrupt(t, f, []byte{0x7f, 0x80}); ce.Type != 0x7f || ce.Index != 7 {
		t.Fatalf("exp: type 0x7f at 7 got: %+v", ce)
	}
	mustPanicCorrupt(t, f, []byte{byte(structs.VolumeRegisterRequestType), 0xc1}) // 0xc1: never used in msgpack
	// The FSM still works after a recovered panic: the write txn was
	// aborted, not left holding memdb's lock.
	h := &harness{t: t, f: f, index: 7}
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
}

func TestApply_UnknownIgnorableEntrySkipped(t *testing.T) {
	f := New(nil)
	before := mustSnapshotBytes(t, f)
	if resp := f.Apply(&raft.Log{Index: 1, Data: []byte{0x80 | 0x7f, 0x01}}); resp != nil {
		t.Fatalf("exp: nil got: %#v", resp)
	}
	if !bytes.Equal(before, mustSnapshotBytes(t, f)) {
		t.Fatalf("exp: skipped entry changes nothing got: changed")
	}
	// A known type with the flag set is applied, not skipped.
	data, _ := structs.Encode(structs.VolumeRegisterRequestType|structs.IgnoreUnknownTypeFlag,
		&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("v1", structs.AccessModeSingleNodeWriter)}})
	if resp := f.Apply(&raft.Log{Index: 2, Data: data}); resp != nil {
		t.Fatalf("exp: nil got: %#v", resp)
	}
	if v, _ := f.State().VolumeByID(nil, "v1"); v == nil {
		t.Fatalf("exp: v1 registered got: nil")
	}
}

func TestApply_RefusalIsCodedErrorValue(t *testing.T) {
	f := New(nil)
	data, _ := structs.Encode(structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{"v9"}})
	resp := f.Apply(&raft.Log{Index: 1, Data: data})
	var ce *structs.CodedError
	if err, ok := resp.(error); !ok || !errors.As(err, &ce) || ce.Error() != `not_found: volume "v9" not found` {
		t.Fatalf("exp: not_found coded error got: %#v", resp)
	}
	// An item error keeps its code at the front of the message, so it
	// survives net/rpc's flattening to a string.
	data, _ = structs.Encode(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "v1"}}})
	resp = f.Apply(&raft.Log{Index: 2, Data: data})
	if err, _ := resp.(error); err == nil || err.Error() != "invalid: volumes[0]: external_id: must not be empty" {
		t.Fatalf("exp: invalid item error got: %v", resp)
	}
	if _, ok := resp.(*structs.CodedError); !ok {
		t.Fatalf("exp: *structs.CodedError got: %T", resp)
	}
}

func TestState_IndexesAndLookups(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	s := h.f.State()
	if got := s.LatestIndex(); got != h.index {
		t.Fatalf("LatestIndex: exp: %d got: %d", h.index, got)
	}
	if got := s.TableIndex(TableNodes); got != 1 {
		t.Fatalf("nodes index: exp: 1 got: %d", got)
	}
	if got := s.TableIndex("nope"); got != 0 {
		t.Fatalf("unknown table index: exp: 0 got: %d", got)
	}
	h.registerVolumes(testVolume("b", structs.AccessModeSingleNodeWriter), testVolume("a", structs.AccessModeSingleNodeWriter))
	other := testVolume("c", structs.AccessModeSingleNodeWriter)
	other.PluginID = "other"
	h.registerVolumes(other)
	for _, tc := range []struct {
		plugin string
		want   []string
	}{{"", []string{"a", "b", "c", "v1"}}, {"hostdir", []string{"a", "b", "v1"}}, {"other", []string{"c"}}, {"none", nil}} {
		vols, err := s.Volumes(nil, tc.plugin)
		var ids []string
		for _, v := range vols {
			ids = append(ids, v.ID)
		}
		if err != nil || !equalStrings(ids, tc.want) {
			t.Fatalf("Volumes(%q): exp: %v got: %v %v", tc.plugin, tc.want, ids, err)
		}
	}
	if a, _ := s.AllocsByNode(nil, "n1"); len(a) != 1 || a[0].ID != "a1" {
		t.Fatalf("AllocsByNode: exp: [a1] got: %+v", a)
	}
	if v, _ := s.VolumesByClaimNode(nil, "n1"); len(v) != 1 || v[0].ID != "v1" {
		t.Fatalf("VolumesByClaimNode: exp: [v1] got: %+v", v)
	}
	if n, _ := s.Nodes(nil); len(n) != 1 {
		t.Fatalf("Nodes: exp: 1 got: %d", len(n))
	}
	if p, _ := s.Plugins(nil); len(p) != 1 || p[0].NodesHealthy != 1 {
		t.Fatalf("Plugins: exp: hostdir with 1 healthy node got: %+v", p)
	}
	if v, err := s.VolumeByID(nil, "missing"); v != nil || err != nil {
		t.Fatalf("missing volume: exp: nil, nil got: %v, %v", v, err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestState_WatchFiresOnChange is what blocking queries rely on.
func TestState_WatchFiresOnChange(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeMultiNodeMultiWriter)
	ws := memdb.NewWatchSet()
	if _, err := h.f.State().VolumeByID(ws, "v1"); err != nil {
		t.Fatal(err)
	}
	unrelated := memdb.NewWatchSet()
	h.f.State().NodeByID(unrelated, "n1")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := ws.WatchCtx(ctx); err == nil {
		t.Fatalf("exp: no change yet got: fired")
	}
	h.release("v1", "a1")
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ws.WatchCtx(ctx); err != nil {
		t.Fatalf("exp: watch fired by the release got: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := unrelated.WatchCtx(ctx2); err == nil {
		t.Fatalf("exp: node watch not fired by a volume change got: fired")
	}
}

// A snapshot of the store is one moment: rows and table index agree even
// when a write lands between reading them (on the live store the index
// read after the rows covered a write the rows did not show, and a
// blocking query answering with it made its caller sleep through that
// write), and its watches still fire on later writes to the live store.
func TestState_SnapshotReadsOneMomentAndWatchesTheLiveStore(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeMultiNodeMultiWriter)
	live := h.f.State()
	snap := live.Snapshot()
	ws := memdb.NewWatchSet()
	before, err := snap.VolumeByID(ws, "v1")
	if err != nil || before == nil || len(before.WriteClaims)+len(before.ReadClaims) == 0 {
		t.Fatalf("setup exp: v1 with a live claim got: %+v %v", before, err)
	}
	indexBefore := snap.TableIndex(TableVolumes)

	h.release("v1", "a1") // lands between the row read and the index read

	if got := snap.TableIndex(TableVolumes); got != indexBefore {
		t.Fatalf("snapshot's volumes index after a live write exp: %d (its moment) got: %d", indexBefore, got)
	}
	if got := live.TableIndex(TableVolumes); got <= indexBefore {
		t.Fatalf("live volumes index after the release exp: above %d got: %d", indexBefore, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ws.WatchCtx(ctx); err != nil {
		t.Fatalf("watch taken on the snapshot exp: fired by the live release got: %v", err)
	}
	if snap.AbandonCh() != live.AbandonCh() {
		t.Fatal("snapshot's abandon channel exp: the live store's got: another")
	}
}

func TestRestore_AbandonsOldStoreAndReplacesState(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	snapBytes := mustSnapshotBytes(t, h.f)

	f2 := New(nil)
	h2 := &harness{t: t, f: f2}
	h2.registerVolumes(testVolume("stale", structs.AccessModeSingleNodeWriter))
	old := f2.State()
	ws := memdb.NewWatchSet()
	old.VolumeByID(ws, "anything")

	if err := f2.Restore(io.NopCloser(bytes.NewReader(snapBytes))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	select {
	case <-old.AbandonCh():
	default:
		t.Fatalf("exp: old store abandoned got: open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ws.WatchCtx(ctx); err != nil {
		t.Fatalf("exp: blocking read woken by restore got: %v", err)
	}
	if v, _ := f2.State().VolumeByID(nil, "stale"); v != nil {
		t.Fatalf("exp: old state gone got: %+v", v)
	}
	if !bytes.Equal(snapBytes, mustSnapshotBytes(t, f2)) {
		t.Fatalf("exp: restored snapshot identical got: different")
	}
	if got := f2.State().LatestIndex(); got != h.index {
		t.Fatalf("restored LatestIndex: exp: %d got: %d", h.index, got)
	}
}

func TestRestore_RefusesBadSnapshotsAndKeepsState(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	good := mustSnapshotBytes(t, h.f)
	badVersion, _ := structs.EncodeMsgpack(snapshotHeader{Magic: snapshotMagic, Version: 99})
	for name, data := range map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)-1],
		"version":   badVersion,
		"garbage":   []byte("not a snapshot at all"),
	} {
		t.Run(name, func(t *testing.T) {
			before := h.f.State()
			if err := h.f.Restore(io.NopCloser(bytes.NewReader(data))); err == nil {
				t.Fatalf("exp: error got: nil")
			}
			if h.f.State() != before {
				t.Fatalf("exp: state kept after a failed restore got: replaced")
			}
		})
	}
}

// TestSnapshot_ConsistentWhileApplying: a snapshot taken before an entry
// does not see it, even when persisted after.
func TestSnapshot_ConsistentWhileApplying(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	want := mustSnapshotBytes(t, h.f)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	entries := make([][]byte, 50)
	for i := range entries {
		entries[i] = mustEncode(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{
			Volumes: []*structs.Volume{testVolume(fmt.Sprintf("w%d", i), structs.AccessModeSingleNodeWriter)}})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, e := range entries {
			h.f.apply(uint64(1000+i), e)
		}
	}()
	var buf bytes.Buffer
	if err := snap.(*fsmSnapshot).write(&buf); err != nil {
		t.Fatal(err)
	}
	<-done
	if !bytes.Equal(want, buf.Bytes()) {
		t.Fatalf("exp: snapshot as of when taken got: later state")
	}
}

func mustEncode(t testing.TB, mt structs.MessageType, req any) []byte {
	t.Helper()
	data, err := structs.Encode(mt, req)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSnapshot_PersistThroughRaftSink runs the path raft uses: Persist to a
// snapshot store's sink, then Restore from what it stored.
func TestSnapshot_PersistThroughRaftSink(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(raft.SnapshotVersionMax, h.index, 1, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := h.f.Snapshot()
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	snap.Release()
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	f2 := New(nil)
	if err := f2.Restore(rc); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !bytes.Equal(mustSnapshotBytes(t, h.f), mustSnapshotBytes(t, f2)) {
		t.Fatalf("exp: identical state after persist and restore got: different")
	}
}

func TestRelaxGC_OverlappingRestoresPutTheSettingBack(t *testing.T) {
	orig := debug.SetGCPercent(123)
	defer debug.SetGCPercent(orig)
	endA := relaxGC()
	endB := relaxGC()
	if got := debug.SetGCPercent(restoreGCPercent); got != restoreGCPercent {
		t.Fatalf("during restores exp: %d got: %d", restoreGCPercent, got)
	}
	endA()
	if got := debug.SetGCPercent(restoreGCPercent); got != restoreGCPercent {
		t.Fatalf("while one restore still runs exp: %d got: %d", restoreGCPercent, got)
	}
	endB()
	if got := debug.SetGCPercent(123); got != 123 {
		t.Fatalf("after the last restore exp: 123 got: %d", got)
	}
}
