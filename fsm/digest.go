package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/claimd/claimd/structs"
)

// Digest hashes the state for comparing servers (S2): the SHA-256 of its
// snapshot stream, whose bytes are canonical, and the Raft index of the
// last entry that changed it (LatestIndex), both read from one frozen
// view, so the index always names the state that was hashed.
//
// The index is the state's own, not Raft's applied index: Raft counts an
// entry applied once it has handed it to the FSM goroutine, which may
// still be working through thousands of entries behind it (a restarted
// server replaying its log), so a state read "at" Raft's applied index
// may be an older one. Two servers whose digests name the same index have
// applied the same writes and, by S2, hold the same bytes.
func (s *StateStore) Digest() (*structs.StateDigest, error) {
	view := s.Snapshot()
	h := sha256.New()
	cw := &countingWriter{w: h}
	if err := view.WriteSnapshot(cw); err != nil {
		return nil, err
	}
	return &structs.StateDigest{AppliedIndex: view.LatestIndex(), SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: cw.n}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
