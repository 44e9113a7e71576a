package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/claimd/claimd/structs"
)

// WriteSnapshot writes this store in snapshot format. Called on a frozen
// view (Snapshot()), the bytes and the view's LatestIndex describe the
// same moment, which is how a backup names the index of its state.
func (s *StateStore) WriteSnapshot(w io.Writer) error {
	snap := newSnapshot(s)
	defer snap.Release()
	return snap.write(w)
}

// CountSnapshot reads a snapshot stream and counts its records per table,
// without building a store: `claimd operator snapshot inspect` runs it
// offline on an archive. Each record is decoded as its table's type, and
// the stream is refused where Restore would refuse it (header, version,
// unknown kind, no end record).
func CountSnapshot(r io.Reader) (map[string]int, error) {
	dec := codec.NewDecoder(bufio.NewReaderSize(r, 64<<10), structs.MsgpackHandle)
	if err := readSnapshotHeader(dec); err != nil {
		return nil, err
	}
	tables := make(map[recordKind]string, len(snapshotTables))
	news := make(map[recordKind]func() any, len(snapshotTables))
	counts := make(map[string]int, len(snapshotTables))
	for _, t := range snapshotTables {
		tables[t.kind], news[t.kind] = t.table, t.new
		counts[t.table] = 0
	}
	for n := 0; ; n++ {
		var kind recordKind
		if err := dec.Decode(&kind); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("snapshot: truncated after %d records", n)
			}
			return nil, fmt.Errorf("snapshot: record %d kind: %w", n, err)
		}
		if kind == kindEnd {
			return counts, nil
		}
		table, ok := tables[kind]
		if !ok {
			return nil, fmt.Errorf("snapshot: record %d has unknown kind %d", n, kind)
		}
		if err := dec.Decode(news[kind]()); err != nil {
			return nil, fmt.Errorf("snapshot: record %d (%s): %w", n, table, err)
		}
		counts[table]++
	}
}

// readSnapshotHeader checks the magic and the version of a snapshot
// stream.
func readSnapshotHeader(dec *codec.Decoder) error {
	var hdr snapshotHeader
	if err := dec.Decode(&hdr); err != nil {
		return fmt.Errorf("restore: read header: %w", err)
	}
	if hdr.Magic != snapshotMagic {
		return fmt.Errorf("restore: not a claimd snapshot (magic %q)", hdr.Magic)
	}
	if hdr.Version != snapshotVersion {
		return fmt.Errorf("restore: snapshot version %d, this server reads only %d", hdr.Version, snapshotVersion)
	}
	return nil
}
