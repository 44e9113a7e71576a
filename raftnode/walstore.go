package raftnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// walStore is raft-wal with claimd's lock on its directory, and with what
// raft-wal v0.4.2 lacks on a full disk (issue 37).
//
// raft-wal seals a segment when it fills and creates the next one (a
// preallocated file of the segment size) in the background. If that
// fails, for want of space or otherwise, it logs "rotate error" and keeps
// the sealed segment as its tail: every later append fails with "segment
// is sealed", nothing retries the rotation, and only reopening the log
// recovers (the reopened log has every entry appended before the seal).
// So this store:
//   - refuses appends while the disk has less than a new segment and its
//     metadata need (walSpaceNeeded), with a DiskFullError that says so,
//     instead of letting raft-wal try a rotation that cannot succeed;
//   - when a write fails in a way that leaves raft-wal unable to append
//     (a sealed tail, ENOSPC, a segment file left behind by a failed
//     create), reopens the WAL under its own lock on the next write once
//     the space is there, and checks that the reopened log ends where
//     Raft was last told it does.
//
// hashicorp/raft keeps this object for its whole life; the *wal.WAL inside
// is swapped under mu.
type walStore struct {
	dir    string
	seg    int // segment size in bytes
	logger hclog.Logger
	lock   *os.File

	// mu guards w: every call into w holds it for reading, a reopen holds
	// it for writing while it swaps w.
	mu sync.RWMutex
	w  *wal.WAL

	// wmu serialises the calls that change the log (StoreLogs,
	// DeleteRange; Raft makes them from its main loop and from its
	// snapshot goroutine) and guards the fields below.
	wmu sync.Mutex
	// broken is the failure that left w unable to append; a reopen clears it.
	broken error
	// lost is set when a reopened log ended before last: only a restart
	// puts Raft's view and the log together again, so every change is
	// refused with it.
	lost error
	// last is the log's last index after the last change that succeeded:
	// what Raft believes the log holds.
	last uint64
	// checkSpace refuses appends and tail truncations before raft-wal tries
	// them when the disk has less than walSpaceNeeded. Always on outside
	// tests; the test of the reopen turns it off to let a rotation fail.
	checkSpace bool
}

var (
	_ raft.LogStore          = (*walStore)(nil)
	_ raft.StableStore       = (*walStore)(nil)
	_ raft.MonotonicLogStore = (*walStore)(nil)
)

// openWAL opens (or makes) a raft-wal log in dir. raft-wal's meta database
// waits forever for its file lock, so claimd takes its own lock first,
// with a bounded wait. A segment size of 0 means raft-wal's default.
func openWAL(dir string, segmentSize int, logger hclog.Logger) (*walStore, error) {
	if segmentSize <= 0 {
		segmentSize = wal.DefaultSegmentSize
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	lockPath := filepath.Join(dir, "claimd.lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", lockPath, err)
	}
	deadline := time.Now().Add(storeLockTimeout)
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			lock.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("open %s: locked by another process (is another claimd using this data dir?)", dir)
			}
			return nil, fmt.Errorf("lock %s: %w", lockPath, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := &walStore{dir: dir, seg: segmentSize, logger: logger.Named("wal"), lock: lock, checkSpace: true}
	// Say what the store needs rather than fail on a bare ENOSPC from
	// raft-wal's preallocation (a new log creates its first segment at
	// once), or start a server that will refuse every append.
	if free, err := freeBytes(dir); err == nil && free < walSpaceNeeded(segmentSize) {
		lock.Close()
		return nil, fmt.Errorf("open %s: not enough disk space to start: %s", dir, s.full(free, nil).spaceStr())
	}
	w, err := s.open()
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	s.w = w
	if s.last, err = w.LastIndex(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return s, nil
}

func (s *walStore) open() (*wal.WAL, error) {
	w, err := wal.Open(s.dir, wal.WithLogger(s.logger), wal.WithSegmentSize(s.seg))
	if err != nil && noSpace(err) {
		if free, ferr := freeBytes(s.dir); ferr == nil {
			return nil, s.full(free, err)
		}
	}
	return w, err
}

// full is the error for a disk with free bytes left.
func (s *walStore) full(free uint64, cause error) *DiskFullError {
	return &DiskFullError{Dir: s.dir, Free: free, Need: walSpaceNeeded(s.seg),
		NeedWhat: fmt.Sprintf("room for a new %s wal segment and 1 MiB for its metadata", sizeStr(uint64(s.seg))), Err: cause}
}

// spaceStr is the free and needed space, for the start-up error.
func (e *DiskFullError) spaceStr() string {
	return fmt.Sprintf("%s free, the wal log store needs %s (%s)", sizeStr(e.Free), sizeStr(e.Need), e.NeedWhat)
}

// ready is called (wmu held) before a change to the log: it refuses one
// the disk cannot take and reopens a WAL that a failed write left unable
// to append, once there is space. needSpace: the change may create a
// segment file.
func (s *walStore) ready(needSpace bool) error {
	if s.lost != nil {
		return s.lost
	}
	if s.broken == nil && !(needSpace && s.checkSpace) {
		return nil
	}
	free, err := freeBytes(s.dir)
	if err != nil {
		// Cannot tell: let raft-wal try (it says what fails).
		s.logger.Warn("cannot read free disk space", "dir", s.dir, "error", err)
	} else if free < walSpaceNeeded(s.seg) {
		return s.full(free, s.broken)
	}
	if s.broken != nil {
		return s.reopen()
	}
	return nil
}

// reopen closes and reopens the WAL (wmu held). raft-wal's own recovery
// then finds the log as it was persisted: a segment sealed by a rotation
// that failed afterwards is opened as sealed with every entry in it, and
// the next segment is made (or, if a failed create left an empty file,
// recovered as empty). The log must end where Raft believes it does:
//   - past it, the extra entries are from an append that reported a
//     failure (its data reached the file before an error); Raft does not
//     count them, so they are removed, as a follower removes entries that
//     were never acknowledged;
//   - before it, entries Raft holds are missing: Raft's view and the log
//     disagree, and only a restart (which reads the log afresh) puts them
//     together again. That is refused, loudly.
func (s *walStore) reopen() error {
	s.mu.Lock()
	if err := s.w.Close(); err != nil {
		s.logger.Warn("closing the log store before reopening it", "error", err)
	}
	w, err := s.open()
	if err != nil {
		// Keep the closed WAL in place: calls get raft-wal's ErrClosed
		// until a later write reopens it.
		s.mu.Unlock()
		s.logger.Error("reopening the log store", "dir", s.dir, "error", err)
		return fmt.Errorf("raft log store %s: reopening after a failed write: %w", s.dir, err)
	}
	s.w = w
	s.mu.Unlock()
	last, err := w.LastIndex()
	if err != nil {
		return err
	}
	switch {
	case last > s.last:
		s.logger.Warn("reopened log store holds entries from a failed append; removing them", "dir", s.dir, "from", s.last+1, "to", last)
		if err := w.DeleteRange(s.last+1, last); err != nil {
			s.broken = err
			return fmt.Errorf("raft log store %s: removing entries %d-%d of a failed append: %w", s.dir, s.last+1, last, err)
		}
	case last < s.last:
		s.lost = fmt.Errorf("raft log store %s: reopened log ends at index %d, before %d which Raft holds; restart the server", s.dir, last, s.last)
		s.logger.Error("reopened log store ends before Raft's last index", "dir", s.dir, "last_index", last, "raft_last_index", s.last)
		return s.lost
	}
	s.logger.Info("log store reopened after a failed write; taking writes again", "dir", s.dir, "last_index", s.last, "failure", s.broken)
	s.broken = nil
	return nil
}

// failed records a failed change (wmu held) and says why it failed: a
// failure that leaves raft-wal unable to append marks the WAL for a
// reopen, and a full disk is reported as one.
func (s *walStore) failed(err error) error {
	if errors.Is(err, wal.ErrSealed) || noSpace(err) || errors.Is(err, fs.ErrExist) {
		s.broken = err
	}
	if noSpace(err) || s.broken != nil {
		if free, ferr := freeBytes(s.dir); ferr == nil && (noSpace(err) || free < walSpaceNeeded(s.seg)) {
			return s.full(free, err)
		}
	}
	if s.broken != nil {
		return fmt.Errorf("raft log store %s: %w (the log is reopened on the next write)", s.dir, err)
	}
	return err
}

// StoreLogs implements raft.LogStore.
func (s *walStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.ready(true); err != nil {
		return err
	}
	err := s.storeLogs(logs)
	if err != nil && errors.Is(err, wal.ErrSealed) {
		// A rotation failed after the last append, and the space may be
		// back already: reopen now and append once more.
		s.broken = err
		if rerr := s.ready(true); rerr != nil {
			return rerr
		}
		err = s.storeLogs(logs)
	}
	if err != nil {
		return s.failed(err)
	}
	s.last = logs[len(logs)-1].Index
	return nil
}

func (s *walStore) storeLogs(logs []*raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.StoreLogs(logs)
}

// StoreLog implements raft.LogStore.
func (s *walStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// DeleteRange implements raft.LogStore. Removing the tail (a follower
// dropping entries that conflict with its leader's, or the whole log after
// a snapshot is installed) makes raft-wal create a new segment, so it needs
// the space an append does; removing old entries from the head frees
// space and is never refused for want of it.
func (s *walStore) DeleteRange(min, max uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.ready(max >= s.last); err != nil {
		return err
	}
	s.mu.RLock()
	err := s.w.DeleteRange(min, max)
	var last uint64
	if err == nil {
		last, err = s.w.LastIndex()
	}
	s.mu.RUnlock()
	if err != nil {
		return s.failed(err)
	}
	s.last = last
	return nil
}

// FirstIndex implements raft.LogStore.
func (s *walStore) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.FirstIndex()
}

// LastIndex implements raft.LogStore.
func (s *walStore) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.LastIndex()
}

// GetLog implements raft.LogStore.
func (s *walStore) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.GetLog(index, l)
}

// IsMonotonic implements raft.MonotonicLogStore, as raft-wal does: Raft
// must remove the whole log after installing a snapshot.
func (s *walStore) IsMonotonic() bool { return true }

// Set implements raft.StableStore (raft-wal's metadata database).
func (s *walStore) Set(key, val []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stableErr(s.w.Set(key, val))
}

// Get implements raft.StableStore.
func (s *walStore) Get(key []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.Get(key)
}

// SetUint64 implements raft.StableStore.
func (s *walStore) SetUint64(key []byte, val uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stableErr(s.w.SetUint64(key, val))
}

// GetUint64 implements raft.StableStore.
func (s *walStore) GetUint64(key []byte) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.GetUint64(key)
}

// stableErr names a full disk under a failed stable-store write (Raft
// stops the process on one: it cannot go on without its term and vote).
func (s *walStore) stableErr(err error) error {
	if err != nil && noSpace(err) {
		if free, ferr := freeBytes(s.dir); ferr == nil {
			return s.full(free, err)
		}
	}
	return err
}

// writeRefusal is why an append would be refused now, or nil: a disk
// with less free than the store needs. (A WAL waiting for a reopen with
// the space back is not refused: the next append reopens it.)
func (s *walStore) writeRefusal() error {
	free, err := freeBytes(s.dir)
	if err != nil || free >= walSpaceNeeded(s.seg) {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.checkSpace && s.broken == nil {
		return nil
	}
	return s.full(free, s.broken)
}

// Close closes the WAL and releases the directory's lock.
func (s *walStore) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.w != nil {
		err = s.w.Close()
	}
	if cerr := s.lock.Close(); err == nil { // closing releases the flock
		err = cerr
	}
	return err
}
