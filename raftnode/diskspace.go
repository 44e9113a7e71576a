package raftnode

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// walMetaReserve is the room kept beside a wal segment for raft-wal's
// metadata database (wal-meta.db: the segment list and Raft's term and
// vote), which is written on every rotation and election.
const walMetaReserve = 1 << 20

// walSpaceNeeded is the free space a wal log store needs to take writes:
// room for the next segment file (raft-wal preallocates each one whole,
// when the current one fills) and for its metadata.
func walSpaceNeeded(segmentSize int) uint64 {
	return uint64(segmentSize) + walMetaReserve
}

// DiskFullError is a log store that cannot take writes for want of disk
// space. errors.Is(err, syscall.ENOSPC) is true for it.
type DiskFullError struct {
	Dir  string // the store's directory
	Free uint64 // bytes free there for claimd (statfs f_bavail)
	// Need is what the store needs free to take writes, and NeedWhat says
	// what that is made of; 0 when the store cannot say (boltdb grows
	// page by page).
	Need     uint64
	NeedWhat string
	Err      error // the failure that showed it, if any
}

func (e *DiskFullError) Error() string {
	msg := fmt.Sprintf("raft log store %s is out of disk space: %s free", e.Dir, sizeStr(e.Free))
	if e.Need > 0 {
		msg += fmt.Sprintf(", it needs %s (%s)", sizeStr(e.Need), e.NeedWhat)
	}
	msg += "; writes are refused until space is freed"
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

func (e *DiskFullError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, syscall.ENOSPC) true whatever failure showed it.
func (e *DiskFullError) Is(target error) bool { return target == syscall.ENOSPC }

// sizeStr writes a byte count for an operator: MiB, with the exact count.
func sizeStr(n uint64) string {
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}

// freeBytes is the space an unprivileged writer may still use in dir's
// file system.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// noSpace says whether err is the file system running out of space (or
// of the user's quota, which is the same to the store).
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
