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

import (
	"sync"
	"time"
)

// Writer runs write, which must write the whole current state (so a later
// write covers every earlier change), never two at once.
type Writer struct {
	write func() error
	// linger: see NewLinger. sleep is time.Sleep (a test's hook).
	linger time.Duration
	sleep  func(time.Duration)

	mu   sync.Mutex
	cond *sync.Cond
	// asked counts Flush calls; written is how many of them the last
	// finished write covers (the count when that write began).
	asked, written uint64
	writing        bool
	err            error // the last finished write's result
	// lastCovered is how many Flush calls the last finished write covered.
	lastCovered uint64
}

// New returns a Writer that writes with write.
func New(write func() error) *Writer {
	return NewLinger(write, 0)
}

// NewLinger returns a Writer that, when the last write covered more than
// one caller (changes are arriving together), waits linger before the next
// write, so that it covers the changes made meanwhile too. Without it,
// changes that arrive one after another each get a write of their own
// whenever a write is cheap: with a hundred volumes changing hands at
// once, the node's lease file was written about once per change, most of
// an agent's CPU time on two cores (issue 41). A caller alone (the last
// write covered only itself, or none ran yet) never waits.
func NewLinger(write func() error, linger time.Duration) *Writer {
	w := &Writer{write: write, linger: linger, sleep: time.Sleep}
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
		if w.linger > 0 && w.lastCovered > 1 {
			// Others wait meanwhile (writing is set): the callers that
			// arrive now join this write instead of starting the next.
			w.mu.Unlock()
			w.sleep(w.linger)
			w.mu.Lock()
		}
		covers := w.asked
		w.mu.Unlock()
		err := w.write()
		w.mu.Lock()
		w.writing = false
		w.lastCovered = covers - w.written
		w.written, w.err = covers, err
		w.cond.Broadcast()
	}
	return w.err
}
