package hostdir

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// store is the plugin's view of Root: volumes, their metadata, attachments
// and registered nodes. It holds no state in memory; every process sharing
// Root sees the same thing.
type store struct {
	root string
	// autoCreate makes any valid volume ID exist on first use, so that
	// volumes registered with claimd need no CreateVolume (claimd never
	// calls it). Off by default: the CSI sanity suite expects NotFound.
	autoCreate bool
}

func (s store) volumeDir(id string) string { return filepath.Join(s.root, "volumes", id) }
func (s store) metaFile(id string) string  { return filepath.Join(s.root, "meta", id+".json") }
func (s store) attachFile(id string) string {
	return filepath.Join(s.root, "attachments", id+".json")
}
func (s store) nodeFile(id string) string { return filepath.Join(s.root, "nodes", id) }

func (s store) init() error {
	for _, d := range []string{"volumes", "meta", "attachments", "nodes"} {
		if err := os.MkdirAll(filepath.Join(s.root, d), 0o755); err != nil {
			return fmt.Errorf("hostdir: create %s: %w", d, err)
		}
	}
	return nil
}

// volumeIDForName derives the volume ID from a CreateVolume name. Names that
// are safe path elements are used as they are, which keeps IDs readable in
// tests; others are hashed. The mapping is a pure function, so CreateVolume
// is idempotent without a name index.
func volumeIDForName(name string) string {
	if validID(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "h-" + hex.EncodeToString(sum[:20])
}

// volumeExists reports whether id names a volume. IDs that could not be a
// directory name under volumes/ name no volume.
func (s store) volumeExists(id string) (bool, error) {
	if !validID(id) {
		return false, nil
	}
	fi, err := os.Stat(s.volumeDir(id))
	if errors.Is(err, fs.ErrNotExist) {
		if s.autoCreate {
			if err := os.MkdirAll(s.volumeDir(id), 0o755); err != nil {
				return false, err
			}
			return true, nil
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// volumeMeta is what CreateVolume knew. Hand-made volumes have none.
type volumeMeta struct {
	Name          string    `json:"name"`
	CapacityBytes int64     `json:"capacity_bytes"`
	Created       time.Time `json:"created"`
}

func (s store) readMeta(id string) (*volumeMeta, error) {
	var m volumeMeta
	ok, err := readJSON(s.metaFile(id), &m)
	if err != nil || !ok {
		return nil, err
	}
	return &m, nil
}

// attachment is one node a volume is attached to.
type attachment struct {
	AccessMode string    `json:"access_mode"`
	ReadOnly   bool      `json:"read_only"`
	Since      time.Time `json:"since"`
}

// attachments of one volume, by node ID.
type attachments struct {
	Nodes map[string]attachment `json:"nodes"`
}

func (s store) readAttachments(id string) (*attachments, error) {
	a := &attachments{}
	if _, err := readJSON(s.attachFile(id), a); err != nil {
		return nil, err
	}
	if a.Nodes == nil {
		a.Nodes = make(map[string]attachment)
	}
	return a, nil
}

func (s store) writeAttachments(id string, a *attachments) error {
	if len(a.Nodes) == 0 {
		if err := os.Remove(s.attachFile(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeJSON(s.attachFile(id), a)
}

// lockAttachments takes an exclusive flock that every hostdir process
// sharing Root honours, so two controllers cannot both attach a
// single-node volume to different nodes.
func (s store) lockAttachments() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(s.root, "attachments", ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func (s store) registerNode(id string) error {
	return writeJSON(s.nodeFile(id), map[string]any{"node_id": id, "registered": time.Now().UTC()})
}

func (s store) nodeExists(id string) (bool, error) {
	if !validID(id) {
		return false, nil
	}
	_, err := os.Stat(s.nodeFile(id))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// readJSON decodes path into v; a missing file is (false, nil).
func readJSON(path string, v any) (bool, error) {
	buf, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(buf, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// writeJSON replaces path atomically and durably: attachment records are
// the plugin's promise about which node holds a volume, and must survive a
// crash of the plugin or the machine.
func writeJSON(path string, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(buf)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}
