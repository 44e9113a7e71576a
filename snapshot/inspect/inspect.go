// Package inspect verifies a snapshot archive and counts the records of
// each table in its state, without a server (`claimd operator snapshot
// inspect`, the HTTP API's inspect). It stands apart from package
// snapshot because counting decodes the state with package fsm (go-memdb,
// hashicorp/raft), which the archive format and its stream, and so the Go
// client, do without.
package inspect

import (
	"fmt"
	"io"
	"os"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/snapshot"
)

// Report is a verified archive and its record count per table.
type Report struct {
	snapshot.Info
	Tables map[string]int `json:"tables"`
}

// Archive verifies an archive and counts the records of each table in its
// state, decoding every record (as a restore would) without building a
// store.
func Archive(r io.Reader) (*Report, error) {
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
	info, err := snapshot.Read(r, pw)
	pw.CloseWithError(err)
	c := <-done
	if err != nil {
		return nil, err
	}
	if c.err != nil {
		return nil, fmt.Errorf("%w: state.bin matches its checksum but does not decode: %v", snapshot.ErrCorrupt, c.err)
	}
	return &Report{Info: *info, Tables: c.tables}, nil
}

// File is Archive of the file at path.
func File(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Archive(f)
}
