package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/claimd/claimd/structs"
)

// usageRecord is one allocation's use of one volume on this node, written
// next to the publish path before the volume is staged and removed after
// the publish is undone. The set of records for a staging path is the usage
// count that decides when NodeUnstageVolume may run, and because it is on
// disk it survives agent restarts.
type usageRecord struct {
	PluginID       string                 `json:"plugin_id"`
	VolumeID       string                 `json:"volume_id"`
	ExternalID     string                 `json:"external_id"`
	AllocID        string                 `json:"alloc_id"`
	ReadOnly       bool                   `json:"read_only"`
	AccessMode     structs.AccessMode     `json:"access_mode"`
	AttachmentMode structs.AttachmentMode `json:"attachment_mode"`
	StagingPath    string                 `json:"staging_path"`
	TargetPath     string                 `json:"target_path"`
}

const usageSuffix = ".usage.json"

func usageFile(targetPath string) string { return targetPath + usageSuffix }

// writeUsage persists a record atomically (temp file, rename), so a crash
// of the agent leaves either no record or a whole one. There is no fsync:
// the record must outlive the agent process, which the page cache ensures,
// while a machine crash takes the mounts the record protects with it.
func writeUsage(r usageRecord) error {
	buf, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var f *os.File
	if err = inParent(r.TargetPath, func(dir string) (err error) {
		f, err = os.CreateTemp(dir, ".usage-*")
		return err
	}); err != nil {
		return fmt.Errorf("write usage record: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(buf)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write usage record: %w", err)
	}
	if err := os.Rename(tmp, usageFile(r.TargetPath)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write usage record: %w", err)
	}
	return nil
}

// mkdirParent makes the directory a target path goes in (inParent).
func mkdirParent(targetPath string) error {
	return inParent(targetPath, nil)
}

// inParent makes the directory a target path goes in and runs op (if any)
// in it. The allocation's directory is shared with its other volumes,
// whose UnmountVolume may remove it when it looks empty, between our
// MkdirAll and op (or between MkdirAll's two levels): try again then.
func inParent(targetPath string, op func(dir string) error) error {
	dir := filepath.Dir(targetPath)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = os.MkdirAll(dir, 0o755); err == nil && op != nil {
			err = op(dir)
		}
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

func removeUsage(targetPath string) error {
	if err := os.Remove(usageFile(targetPath)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove usage record: %w", err)
	}
	return nil
}

// loadUsages reads every record of one plugin under root. Unreadable records
// are returned as errors but do not stop the scan: one corrupt file must not
// hide the other users of a volume.
func loadUsages(root, pluginID string) ([]usageRecord, error) {
	files, err := filepath.Glob(filepath.Join(root, "per-alloc", "*", "*", "*"+usageSuffix))
	if err != nil {
		return nil, err
	}
	var out []usageRecord
	var errs []error
	for _, f := range files {
		buf, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r usageRecord
		if err := json.Unmarshal(buf, &r); err != nil {
			errs = append(errs, fmt.Errorf("usage record %s: %w", f, err))
			continue
		}
		if r.PluginID == pluginID {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}
