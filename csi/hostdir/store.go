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
	"slices"
	"strings"
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
	for _, d := range []string{"volumes", "meta", "attachments", "attach-locks", "nodes", "snapshots", "snapmeta", "expansions", "health"} {
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
	ok, err := s.volumePresent(id)
	if err != nil || ok || !s.autoCreate || !validID(id) {
		return ok, err
	}
	if err := os.MkdirAll(s.volumeDir(id), 0o755); err != nil {
		return false, err
	}
	return true, nil
}

// volumePresent reports whether id's directory exists, never creating it:
// CreateVolume and a clone's source must see a volume that was not made,
// not one that auto-create made empty on the spot (which CreateVolume then
// took for an existing volume of size 0 and refused any capacity for).
func (s store) volumePresent(id string) (bool, error) {
	if !validID(id) {
		return false, nil
	}
	fi, err := os.Stat(s.volumeDir(id))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// volumeMeta is what CreateVolume knew, and the quota expansion grew.
// Hand-made volumes have none until they are expanded.
type volumeMeta struct {
	Name          string    `json:"name"`
	CapacityBytes int64     `json:"capacity_bytes"`
	Created       time.Time `json:"created"`
	// Parameters and Source (see contentSource) are compared when the same
	// name is created again: a retry must ask for the same volume.
	Parameters map[string]string `json:"parameters,omitempty"`
	Source     string            `json:"source,omitempty"`
	// Topology is the volume's accessible topology; empty when the plugin
	// has none.
	Topology []map[string]string `json:"topology,omitempty"`
	// Mutable are the values ControllerModifyVolume set.
	Mutable map[string]string `json:"mutable,omitempty"`
}

// volumeIDs lists the volumes under Root, sorted. Entries that are not
// valid IDs are a CreateVolume's copy in progress, not volumes.
func (s store) volumeIDs() ([]string, error) {
	return listIDs(filepath.Join(s.root, "volumes"), true)
}

// listIDs lists the valid IDs in dir, sorted (os.ReadDir sorts), either
// directories or, trimming ".json", files.
func listIDs(dir string, dirs bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !dirs {
			var ok bool
			if name, ok = strings.CutSuffix(name, ".json"); !ok {
				continue
			}
		}
		if e.IsDir() == dirs && validID(name) {
			out = append(out, name)
		}
	}
	return out, nil
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

// publishedNodes lists the nodes a volume is attached to, sorted.
func (s store) publishedNodes(id string) ([]string, error) {
	a, err := s.readAttachments(id)
	if err != nil {
		return nil, err
	}
	nodes := make([]string, 0, len(a.Nodes))
	for n := range a.Nodes {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return nodes, nil
}

// attachedTo counts the volumes attached to node. The caller holds the
// attachments lock, so the count cannot change under it.
func (s store) attachedTo(node string) (int, error) {
	ids, err := listIDs(filepath.Join(s.root, "attachments"), false)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		a, err := s.readAttachments(id)
		if err != nil {
			return 0, err
		}
		if _, ok := a.Nodes[node]; ok {
			n++
		}
	}
	return n, nil
}

// lockAttachments takes an exclusive flock that every hostdir process
// sharing Root honours, so two controllers cannot both attach a
// single-node volume to different nodes. It excludes every lockVolume too:
// take it to see or change more than one volume's attachments.
func (s store) lockAttachments() (unlock func(), err error) {
	return flockFile(filepath.Join(s.root, "attachments", ".lock"), syscall.LOCK_EX)
}

// lockVolume locks one volume's attachments: the shared lock shared (so
// lockAttachments waits for it), then the volume's own exclusive. Publish
// and unpublish of different volumes go on at once; a count across
// volumes (a node's attachment limit) needs lockAttachments. A hostdir
// of before this lock takes lockAttachments for every call, which
// excludes this one: processes of both kinds may share Root.
func (s store) lockVolume(id string) (unlock func(), err error) {
	shared, err := flockFile(filepath.Join(s.root, "attachments", ".lock"), syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	own, err := flockFile(filepath.Join(s.root, "attach-locks", id), syscall.LOCK_EX)
	if err != nil {
		shared()
		return nil, err
	}
	return func() { own(); shared() }, nil
}

// flockFile opens (creating) path and flocks it with how. Each call has
// its own open file, so calls in one process exclude each other as calls
// in two processes do.
func flockFile(path string, how int) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// nodeRecord is what a node plugin tells controllers sharing Root about
// its node.
type nodeRecord struct {
	NodeID     string            `json:"node_id"`
	Registered time.Time         `json:"registered"`
	MaxVolumes int64             `json:"max_volumes,omitempty"`
	Topology   map[string]string `json:"topology,omitempty"`
}

func (s store) registerNode(rec nodeRecord) error {
	rec.Registered = time.Now().UTC()
	return writeJSON(s.nodeFile(rec.NodeID), rec)
}

// readNode returns a node's record; nil when the node is unknown.
func (s store) readNode(id string) (*nodeRecord, error) {
	if !validID(id) {
		return nil, nil
	}
	var rec nodeRecord
	ok, err := readJSON(s.nodeFile(id), &rec)
	if err != nil || !ok {
		return nil, err
	}
	return &rec, nil
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
