package raftnode

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/internal/testutil"
)

// The wedge of issue 37: raft-wal (v0.4.2) seals a full segment and
// creates the next one in the background; when the create fails for want
// of space it keeps the sealed segment as its tail and refuses every
// append after ("segment is sealed") until the log is reopened. Here the
// rotation is let fail (the space check that normally refuses appends
// first is off, as when something else takes the disk's last space
// between the check and the rotation). The store must say the disk is
// full while it is, take appends again once the space is back, without a
// restart, and keep every entry it acknowledged, then and after a reopen.
func TestWALStore_FailedRotationRecoversOnceSpaceIsBack(t *testing.T) {
	const seg = 256 << 10
	disk := testutil.SmallDisk(t, 4<<20)
	dir := filepath.Join(disk, "wal")
	logger := hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Info})
	s, err := openWAL(dir, seg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	s.checkSpace = false

	data := bytes.Repeat([]byte("c"), 1000)
	next := uint64(1)
	appendOne := func() error {
		err := s.StoreLogs([]*raft.Log{{Index: next, Term: 1, Data: data}})
		if err == nil {
			next++
		}
		return err
	}
	// Half a segment in, then leave room for raft-wal's metadata commit
	// but not for the next segment.
	for next <= 100 {
		if err := appendOne(); err != nil {
			t.Fatal(err)
		}
	}
	free := testutil.FillDisk(t, disk, 64<<10)
	var refused error
	for i := 0; i < 1000 && refused == nil; i++ {
		refused = appendOne()
	}
	if refused == nil {
		t.Fatal("appends on a full disk exp: refused once the segment filled got: 1000 more accepted")
	}
	acked := next - 1
	if acked <= 200 {
		t.Fatalf("appends before the refusal exp: the rest of the segment (> 200 entries) got: %d", acked)
	}
	checkDiskFull(t, refused, dir)
	// Refused every time while the space is missing, with nothing lost.
	if err := appendOne(); err == nil {
		t.Fatal("second append on the full disk exp: refused got: accepted")
	}
	checkDiskFull(t, s.writeRefusal(), dir)

	free()
	if err := s.writeRefusal(); err != nil {
		t.Fatalf("write refusal once the space is back exp: none got: %v", err)
	}
	// Taken again at once, past another rotation, with no restart.
	for i := 0; i < 500; i++ {
		if err := appendOne(); err != nil {
			t.Fatalf("append %d after the space came back exp: ok got: %v", next, err)
		}
	}
	checkLog(t, s, next-1, data)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = openWAL(dir, seg, logger)
	if err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, next-1, data)
	t.Logf("%d entries acknowledged before the disk filled, %d in all, all kept", acked, next-1)
}

// As a server runs: the store refuses appends while the disk has less
// than a new segment needs, before raft-wal tries (and wedges), takes
// them again when the space is back, and a store asked to start on such a
// disk says what it needs instead of failing on a bare ENOSPC. boltdb
// needs no space check: it refuses what it cannot write, naming the full
// disk, and takes writes again by itself.
func TestLogStore_FullDiskRefusesWritesThenTakesThemAgain(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			const seg = 256 << 10
			disk := testutil.SmallDisk(t, 4<<20)
			store, _, err := openStore(disk, kind, seg, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { store.Close() }()
			dir := disk
			if kind == LogStoreWAL {
				dir = filepath.Join(disk, "wal")
			}
			data := bytes.Repeat([]byte("c"), 1000)
			writeLogs(t, store, 1, 50, data)
			next := uint64(51)

			free := testutil.FillDisk(t, disk, 128<<10)
			var refused error
			for i := 0; i < 2000 && refused == nil; i++ {
				refused = store.StoreLogs([]*raft.Log{{Index: next, Term: 1, Data: data}})
				if refused == nil {
					next++
				}
			}
			checkDiskFull(t, refused, dir)
			checkDiskFull(t, store.writeRefusal(), dir)
			if kind == LogStoreWAL {
				if next != 51 {
					t.Fatalf("appends with less free than a segment exp: all refused got: %d taken", next-51)
				}
				if err := store.Close(); err != nil {
					t.Fatal(err)
				}
				_, _, err := openStore(disk, kind, seg, hclog.NewNullLogger())
				if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not enough disk space to start") ||
					!strings.Contains(err.Error(), "free, the wal log store needs 1.2 MiB (1310720 bytes)") {
					t.Fatalf("start on the full disk exp: not enough disk space to start, naming %s, what is free and what it needs got: %v", dir, err)
				}
				t.Logf("start refused: %v", err)
				free()
				if store, _, err = openStore(disk, kind, seg, hclog.NewNullLogger()); err != nil {
					t.Fatalf("start once the space is back exp: ok got: %v", err)
				}
			} else {
				free()
			}
			if err := store.writeRefusal(); err != nil {
				t.Fatalf("write refusal once the space is back exp: none got: %v", err)
			}
			writeLogs(t, store, next, next+999, data)
			checkLog(t, store, next+999, data)
		})
	}
}

func checkDiskFull(t *testing.T, err error, dir string) {
	t.Helper()
	if err == nil || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "raft log store "+dir+" is out of disk space") {
		t.Fatalf("write on the full disk exp: refused, naming %s and the full disk got: %v", dir, err)
	}
}

// checkLog reads back every entry from the first to last.
func checkLog(t *testing.T, s logStore, last uint64, data []byte) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.LastIndex()
	if err != nil || got != last || first != 1 {
		t.Fatalf("log exp: 1-%d got: %d-%d %v", last, first, got, err)
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || l.Index != i || !bytes.Equal(l.Data, data) {
			t.Fatalf("entry %d exp: as appended got: index %d, %d bytes, %v", i, l.Index, len(l.Data), err)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
