// Package coalesce shares one write of a piece of state among every caller
// that changed it while an earlier write ran (group commit).
//
// The agent keeps files that must be on disk before it acts (the
// held-claims record before a mount, the lease file before an unmount):
// with a hundred volumes changing hands at once, one fsync per change,
// each waiting for the one before, made the node the handoff's slowest
// part (issue 41). A caller changes the state in memory, then calls Flush,
// which returns once a write that began after the change has finished:
// the file is never older than what the caller was told, and concurrent
// changes share writes.
package coalesce

import "sync"

// Writer runs write, which must write the whole current state (so a later
// write covers every earlier change), never two at once.
type Writer struct {
	write func() error

	mu   sync.Mutex
	cond *sync.Cond
	// asked counts Flush calls; written is how many of them the last
	// finished write covers (the count when that write began).
	asked, written uint64
	writing        bool
	err            error // the last finished write's result
}

// New returns a Writer that writes with write.
func New(write func() error) *Writer {
	w := &Writer{write: write}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// Flush returns once a write that began after this call has finished, with
// the result of the last finished write (the state is written whole, so
// the last write's result is what the disk holds). The caller that finds
// no write running writes for everyone waiting.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked++
	mine := w.asked
	for w.written < mine {
		if w.writing {
			w.cond.Wait()
			continue
		}
		w.writing = true
		covers := w.asked
		w.mu.Unlock()
		err := w.write()
		w.mu.Lock()
		w.writing = false
		w.written, w.err = covers, err
		w.cond.Broadcast()
	}
	return w.err
}
