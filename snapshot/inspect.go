package snapshot

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/claimd/claimd/fsm"
)

// Inspection is a verified archive and its record count per table.
type Inspection struct {
	Info
	Tables map[string]int `json:"tables"`
}

// Inspect verifies an archive and counts the records of each table in its
// state, decoding every record (as a restore would) without building a
// store. It needs no server.
func Inspect(r io.Reader) (*Inspection, error) {
	pr, pw := io.Pipe()
	type counted struct {
		tables map[string]int
		err    error
	}
	done := make(chan counted, 1)
	go func() {
		tables, err := fsm.CountSnapshot(pr)
		// Drain: Read must reach the archive's end (its checksums) even
		// when the state stream has ended or failed.
		_, _ = io.Copy(io.Discard, pr)
		done <- counted{tables, err}
	}()
	info, err := Read(r, pw)
	pw.CloseWithError(err)
	c := <-done
	if err != nil {
		return nil, err
	}
	if c.err != nil {
		return nil, fmt.Errorf("%w: state.bin matches its checksum but does not decode: %v", ErrCorrupt, c.err)
	}
	return &Inspection{Info: *info, Tables: c.tables}, nil
}

// ClaimdVersion is this binary's version as the Go toolchain recorded it:
// the module version ("(devel)" for a local build) and, when built from a
// checkout, the commit.
func ClaimdVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev
		if dirty {
			v += "+dirty"
		}
	}
	return v
}
