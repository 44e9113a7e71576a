package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// The Raft log stores a server can keep its log in (decision 34). A data
// dir keeps the kind it was made with: the two do not read each other's
// files, and a server moves from one to the other by rejoining its cluster
// with an empty data dir (docs/operations.md).
const (
	// LogStoreBoltDB is raft-boltdb: one bolt file, two fsyncs per append
	// (data pages, then the meta page).
	LogStoreBoltDB = "boltdb"
	// LogStoreWAL is raft-wal (v0.4.2): append-only segment files, one
	// fdatasync per append.
	LogStoreWAL = "wal"
	// DefaultLogStore is what a new data dir gets when none is asked for:
	// wal, measured faster with less CPU on every row and as safe on every
	// test (decision 34). A data dir made with boltdb stays boltdb.
	DefaultLogStore = LogStoreWAL
)

// ValidateLogStore checks a log store name ("" means: what the data dir
// has, else the default).
func ValidateLogStore(field, kind string) error {
	switch kind {
	case "", LogStoreBoltDB, LogStoreWAL:
		return nil
	}
	return fmt.Errorf("%s: %q is not a Raft log store (want %s or %s)", field, kind, LogStoreBoltDB, LogStoreWAL)
}

// logStore is what Raft needs of the log and stable store, and closing.
type logStore interface {
	raft.LogStore
	raft.StableStore
	Close() error
	// writeRefusal says why a write would be refused now for want of
	// disk space (a *DiskFullError), or nil.
	writeRefusal() error
}

// storeLockTimeout bounds the wait for a store's file lock: another
// process holding it is another claimd on the same data dir, and waiting
// for it forever (bolt's default, and raft-wal's meta database) would hang
// the start without a word.
const storeLockTimeout = 2 * time.Second

// openStore opens the log store of a server's raft directory: the kind
// asked for, or (kind "") the kind the directory already holds, else the
// default. A directory holding the other kind is refused, naming both.
func openStore(dir, kind string, segmentSize int, logger hclog.Logger) (logStore, string, error) {
	if err := ValidateLogStore("raft_log_store", kind); err != nil {
		return nil, "", err
	}
	boltPath, walDir := filepath.Join(dir, "raft.db"), filepath.Join(dir, "wal")
	has := ""
	if exists(boltPath) {
		has = LogStoreBoltDB
	}
	if exists(walDir) {
		if has != "" {
			return nil, "", fmt.Errorf("raft log store: %s holds both a boltdb log (raft.db) and a wal log (wal/); keep one", dir)
		}
		has = LogStoreWAL
	}
	switch {
	case kind == "" && has != "":
		kind = has
	case kind == "":
		kind = DefaultLogStore
	case has != "" && has != kind:
		return nil, "", fmt.Errorf("raft log store: the data dir holds a %s log, not %s: start it with -raft-log-store %s, "+
			"or move this server to %s by rejoining with an empty data dir (docs/operations.md, \"Changing a server's log store\")",
			has, kind, has, kind)
	}
	if kind == LogStoreWAL {
		s, err := openWAL(walDir, segmentSize, logger)
		return s, kind, err
	}
	s, err := openLogStore(boltPath)
	return s, kind, err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// openLogStore opens the Raft log (raft-boltdb, fsync on every commit).
// NoFreelistSync and the map freelist, as etcd runs bolt: once Raft has
// compacted its log after a snapshot, the file holds thousands of free
// pages, and bolt's default rewrites that whole freelist on every commit.
// Measured on this project's VM with a compacted 30k-entry log (one
// 600-byte entry per commit): p50 commit 425 to 365 µs alone, and 1.15 to
// 0.71 ms with three stores committing at once on one disk, as a
// three-server test cluster does. Durability is unchanged (data and meta
// pages are synced as before); opening rebuilds the freelist by scanning
// the file, which the trailing-log bound keeps small.
func openLogStore(path string) (*boltStore, error) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{
		Timeout:        storeLockTimeout,
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("open %s: locked by another process (is another claimd using this data dir?)", path)
	}
	if err != nil {
		if noSpace(err) {
			if free, ferr := freeBytes(filepath.Dir(path)); ferr == nil {
				err = &DiskFullError{Dir: filepath.Dir(path), Free: free, Err: err}
			}
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &boltStore{BoltStore: store, dir: filepath.Dir(path)}, nil
}

// boltStore is raft-boltdb with a full disk named as such. bolt needs no
// help to recover: a commit that fails rolls back, and the next one
// succeeds once there is room for its pages. Nothing is refused ahead of
// time (bolt reuses freed pages, so it may still take writes on a disk
// with nothing free); a write that fails for want of space says so.
type boltStore struct {
	*raftboltdb.BoltStore
	dir string

	mu   sync.Mutex
	full bool // the last change failed for want of space
}

func (s *boltStore) StoreLog(l *raft.Log) error { return s.changed(s.BoltStore.StoreLog(l)) }

func (s *boltStore) StoreLogs(logs []*raft.Log) error { return s.changed(s.BoltStore.StoreLogs(logs)) }

func (s *boltStore) DeleteRange(min, max uint64) error {
	return s.changed(s.BoltStore.DeleteRange(min, max))
}

func (s *boltStore) Set(k, v []byte) error { return s.changed(s.BoltStore.Set(k, v)) }

func (s *boltStore) SetUint64(k []byte, v uint64) error {
	return s.changed(s.BoltStore.SetUint64(k, v))
}

// changed records the outcome of a change and names a full disk.
func (s *boltStore) changed(err error) error {
	s.mu.Lock()
	s.full = err != nil && noSpace(err)
	s.mu.Unlock()
	if err == nil || !noSpace(err) {
		return err
	}
	free, ferr := freeBytes(s.dir)
	if ferr != nil {
		return err
	}
	return &DiskFullError{Dir: s.dir, Free: free, Err: err}
}

// boltRetryFree: once this much is free after a change failed for want
// of space, writes are let through again (a commit needs a few 4 KiB
// pages; entries are at most 4 MiB but claim batches are under 64 KiB).
const boltRetryFree = 1 << 20

// writeRefusal: the last change failed for want of space and the disk
// still has less than boltRetryFree. Otherwise a write is let through: it
// is the only way to learn whether bolt has room now.
func (s *boltStore) writeRefusal() error {
	s.mu.Lock()
	full := s.full
	s.mu.Unlock()
	if !full {
		return nil
	}
	if free, err := freeBytes(s.dir); err == nil && free < boltRetryFree {
		return &DiskFullError{Dir: s.dir, Free: free}
	}
	return nil
}
