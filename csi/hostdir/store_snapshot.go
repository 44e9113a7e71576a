package hostdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Snapshots live beside volumes, in their own ID space:
//
//	snapshots/<id>/      a copy of the source volume's data
//	snapmeta/<id>.json   name, source volume and size
//
// A snapshot exists when its metadata exists; the metadata is written
// only after the copy is complete, so a crash mid-copy leaves no snapshot
// (CreateSnapshot repeated with the name starts the copy again).

// snapshotMeta describes one snapshot.
type snapshotMeta struct {
	Name           string    `json:"name"`
	SourceVolumeID string    `json:"source_volume_id"`
	SizeBytes      int64     `json:"size_bytes"`
	Created        time.Time `json:"created"`
	// Topology is the source volume's accessible topology: a volume made
	// from the snapshot is reachable where the source was.
	Topology []map[string]string `json:"topology,omitempty"`
}

func (s store) snapshotDir(id string) string { return filepath.Join(s.root, "snapshots", id) }
func (s store) snapMetaFile(id string) string {
	return filepath.Join(s.root, "snapmeta", id+".json")
}

// readSnapshot returns a snapshot's metadata; nil when there is no such
// snapshot.
func (s store) readSnapshot(id string) (*snapshotMeta, error) {
	if !validID(id) {
		return nil, nil
	}
	var m snapshotMeta
	ok, err := readJSON(s.snapMetaFile(id), &m)
	if err != nil || !ok {
		return nil, err
	}
	return &m, nil
}

// snapshotIDs lists the snapshots, sorted.
func (s store) snapshotIDs() ([]string, error) {
	return listIDs(filepath.Join(s.root, "snapmeta"), false)
}

// writeSnapshot copies volume src into snapshot id and then records it.
func (s store) writeSnapshot(id, src string, m snapshotMeta) error {
	dir := s.snapshotDir(id)
	// A copy left by a crash before the metadata was written is garbage.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := copyTree(s.volumeDir(src), dir); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("copy volume %s: %w", src, err)
	}
	if err := writeJSON(s.snapMetaFile(id), m); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	return nil
}

// deleteSnapshot forgets the snapshot first, then removes its data, so a
// crash in between leaves garbage but never a listed snapshot without data.
func (s store) deleteSnapshot(id string) error {
	if err := os.Remove(s.snapMetaFile(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(s.snapshotDir(id))
}
