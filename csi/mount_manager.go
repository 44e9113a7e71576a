package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/claimd/claimd/structs"
	"github.com/hashicorp/go-hclog"
)

// NodePlugin is the part of a node plugin the mount manager drives. *Client
// implements it; tests substitute fakes. The detach methods must treat
// "nothing to detach" as success, as *Client does.
type NodePlugin interface {
	NodeStageVolume(ctx context.Context, req *NodeStageRequest) error
	NodeUnstageVolume(ctx context.Context, volumeID, stagingPath string) error
	NodePublishVolume(ctx context.Context, req *NodePublishRequest) error
	NodeUnpublishVolume(ctx context.Context, volumeID, targetPath string) error
}

// MountManagerConfig configures a MountManager.
type MountManagerConfig struct {
	// Root is the directory, under the agent's data dir, that holds the
	// staging and per-alloc publish paths.
	Root     string
	PluginID string
	Plugin   NodePlugin
	// RequiresStaging is the plugin's STAGE_UNSTAGE_VOLUME capability.
	RequiresStaging bool
	Logger          hclog.Logger
	// CallerRecordsUsage says that the caller keeps a durable record of
	// every use of a volume itself, written before MountVolume and removed
	// only after UnmountVolume succeeded (the client agent's held-claims
	// record). The manager then writes no usage file of its own and
	// starts from Usages: a file created and removed per mount is two
	// inodes per volume changing hands (issue 41), and it said nothing the
	// caller's record does not. Usage files an earlier version wrote are
	// still read at start and removed with their use.
	CallerRecordsUsage bool
	Usages             []Usage
}

// Usage is one allocation's use of one volume, as the caller recorded it
// (MountManagerConfig.Usages).
type Usage struct {
	VolumeID, ExternalID, AllocID string
	Options                       UsageOptions
}

// MountInfo says where a mounted volume is.
type MountInfo struct {
	// Source is the path to hand to the workload: the publish path.
	Source      string
	StagingPath string // empty when the plugin does not stage
	TargetPath  string
	ReadOnly    bool
}

// MountManager stages and publishes the volumes of one node plugin for the
// allocations on this node.
//
// Concurrency contract: MountVolume and UnmountVolume may be called from any
// number of goroutines. Calls for the same volume are serialised by a
// per-volume lock held across the plugin calls, so NodeStageVolume runs
// once per volume and staging path while any number of allocations mount
// it, and NodeUnstageVolume runs only after the last of them unmounted.
// Calls for different volumes run in parallel. Waiting for the lock honours
// the caller's context. A call that fails leaves the allocation's usage
// recorded (see the package doc); the caller repeats the call or, for a
// failed mount, lets the server-driven release call UnmountVolume.
type MountManager struct {
	cfg    MountManagerConfig
	logger hclog.Logger
	locks  keyedLock // by volume ID

	mu     sync.Mutex                        // guards usages and staged
	usages map[string]map[string]usageRecord // volume ID → target path → record
	staged map[string]bool                   // staging paths staged by this process
}

// NewMountManager creates the manager and loads the usage records that a
// previous run of the agent left under Root.
func NewMountManager(cfg MountManagerConfig) (*MountManager, error) {
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, structs.Invalid("mount root", fmt.Sprintf("%q must be an absolute path", cfg.Root))
	}
	if err := structs.ValidateID("plugin_id", cfg.PluginID); err != nil {
		return nil, err
	}
	if cfg.Plugin == nil {
		return nil, structs.Invalid("plugin", "must be given")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := &MountManager{
		cfg:    cfg,
		logger: cfg.Logger.Named("csi.mounts").With("plugin", cfg.PluginID),
		usages: make(map[string]map[string]usageRecord),
		staged: make(map[string]bool),
	}
	recs, err := loadUsages(cfg.Root, cfg.PluginID)
	for _, r := range recs {
		m.addUsageLocked(r)
	}
	for _, u := range cfg.Usages {
		r, rerr := m.record(u.VolumeID, u.ExternalID, u.AllocID, u.Options)
		if rerr != nil {
			err = errors.Join(err, rerr)
			continue
		}
		m.addUsageLocked(r)
	}
	if err != nil {
		// Keep going: the records that did load protect their volumes.
		m.logger.Warn("some usage records could not be read", "error", err)
	}
	return m, nil
}

// MountVolume makes vol available to allocation allocID and returns where.
// It records the usage, stages the volume if the plugin stages and this
// process has not staged it yet, then publishes it at the allocation's
// path. It is idempotent: repeating it after a failure or a success is safe.
func (m *MountManager) MountVolume(ctx context.Context, vol *structs.Volume, allocID string, readOnly bool,
	publishContext map[string]string) (*MountInfo, error) {
	if vol == nil {
		return nil, structs.Invalid("volume", "must be given")
	}
	if vol.PluginID != m.cfg.PluginID {
		return nil, structs.Invalid("plugin_id", fmt.Sprintf("volume %s belongs to plugin %q, not %q", vol.ID, vol.PluginID, m.cfg.PluginID))
	}
	if vol.ExternalID == "" {
		return nil, structs.Invalid("external_id", "must not be empty")
	}
	u := UsageOptions{ReadOnly: readOnly, AccessMode: vol.AccessMode, AttachmentMode: vol.AttachmentMode, MountOptions: vol.MountOptions}
	rec, err := m.record(vol.ID, vol.ExternalID, allocID, u)
	if err != nil {
		return nil, err
	}

	unlock, err := m.locks.lock(ctx, vol.ID)
	if err != nil {
		return nil, structs.NewError(structs.CodeTimeout, "waiting to mount volume "+vol.ID+": "+err.Error())
	}
	defer unlock()

	// The usage goes on record before anything is staged: from here on an
	// UnmountVolume of another allocation will not unstage under us.
	if err := m.takeUsage(rec); err != nil {
		return nil, err
	}

	info := &MountInfo{Source: rec.TargetPath, TargetPath: rec.TargetPath, ReadOnly: readOnly}
	if m.cfg.RequiresStaging {
		info.StagingPath = rec.StagingPath
		if !m.isStaged(rec.StagingPath) {
			if err := os.MkdirAll(rec.StagingPath, 0o755); err != nil {
				return nil, fmt.Errorf("create staging path: %w", err)
			}
			err := m.cfg.Plugin.NodeStageVolume(ctx, &NodeStageRequest{
				VolumeID:       vol.ExternalID,
				StagingPath:    rec.StagingPath,
				Capability:     u.capability(),
				PublishContext: publishContext,
				VolumeContext:  vol.Context,
				Secrets:        vol.Secrets,
			})
			if err != nil {
				return nil, fmt.Errorf("stage volume %s: %w", vol.ID, err)
			}
			m.setStaged(rec.StagingPath, true)
		}
	}

	if m.cfg.CallerRecordsUsage {
		// The CO makes the target's parent (the CSI spec); the usage file,
		// which lives there, made it otherwise.
		if err := mkdirParent(rec.TargetPath); err != nil {
			return nil, fmt.Errorf("create publish path: %w", err)
		}
	}
	err = m.cfg.Plugin.NodePublishVolume(ctx, &NodePublishRequest{
		VolumeID:       vol.ExternalID,
		StagingPath:    info.StagingPath,
		TargetPath:     rec.TargetPath,
		Capability:     u.capability(),
		ReadOnly:       readOnly,
		PublishContext: publishContext,
		VolumeContext:  vol.Context,
		Secrets:        vol.Secrets,
	})
	if err != nil {
		return nil, fmt.Errorf("publish volume %s for alloc %s: %w", vol.ID, allocID, err)
	}
	m.logger.Debug("volume mounted", "volume", vol.ID, "alloc", allocID, "path", rec.TargetPath)
	return info, nil
}

// UnmountVolume undoes MountVolume for one allocation: NodeUnpublishVolume,
// then, when no other allocation on this node uses the same staging path,
// NodeUnstageVolume. It is idempotent and needs no record of the mount: a
// publish or stage that is already gone counts as done (seed 6 in
// docs/architecture.md), so the server-driven release may call it any number
// of times, also after an agent restart. externalID is the plugin's volume
// ID; usage must match what MountVolume was given, since it names the paths.
func (m *MountManager) UnmountVolume(ctx context.Context, volID, externalID, allocID string, usage UsageOptions) error {
	if externalID == "" {
		return structs.Invalid("external_id", "must not be empty")
	}
	rec, err := m.record(volID, externalID, allocID, usage)
	if err != nil {
		return err
	}

	unlock, err := m.locks.lock(ctx, volID)
	if err != nil {
		return structs.NewError(structs.CodeTimeout, "waiting to unmount volume "+volID+": "+err.Error())
	}
	defer unlock()

	if err := m.cfg.Plugin.NodeUnpublishVolume(ctx, externalID, rec.TargetPath); err != nil {
		return fmt.Errorf("unpublish volume %s for alloc %s: %w", volID, allocID, err)
	}
	if err := m.dropUsage(rec); err != nil {
		return err
	}
	// os.Remove, never RemoveAll: if a plugin left the volume mounted here,
	// RemoveAll would delete the volume's data through the mount.
	removeEmpty(rec.TargetPath, filepath.Dir(rec.TargetPath), filepath.Dir(filepath.Dir(rec.TargetPath)))

	if !m.cfg.RequiresStaging {
		return nil
	}
	if n := m.stagingUsers(volID, rec.StagingPath); n > 0 {
		m.logger.Debug("volume still used on this node, not unstaging", "volume", volID, "users", n)
		return nil
	}
	// Forget the stage first: an unstage that fails may have half undone
	// it, so the next mount must stage again (NodeStage is idempotent).
	m.setStaged(rec.StagingPath, false)
	if err := m.cfg.Plugin.NodeUnstageVolume(ctx, externalID, rec.StagingPath); err != nil {
		return fmt.Errorf("unstage volume %s: %w", volID, err)
	}
	// The staging directories stay: the next mount of this volume on this
	// node (a handoff to another allocation here) finds them instead of
	// creating them again. Directories created and removed per mount were
	// a measurable part of a hundred volumes changing hands at once (issue
	// 41: on ext4 without a journal every new inode is allocated past the
	// recently freed ones). One pair of empty directories per volume ever
	// staged here is what it costs.
	m.logger.Debug("volume unmounted", "volume", volID, "alloc", allocID)
	return nil
}

// Users returns how many allocations on this node use a volume, in any mode.
func (m *MountManager) Users(volID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.usages[volID])
}

// TargetPath is where MountVolume publishes the volume for the allocation
// (MountInfo.Source): known before the mount, so a caller can record it
// with the claim in one write.
func (m *MountManager) TargetPath(volID, allocID string, u UsageOptions) string {
	return PublishPath(m.cfg.Root, allocID, volID, u)
}

// record builds the usage record after checking that every ID is a safe
// path element: they become directory names under Root.
func (m *MountManager) record(volID, externalID, allocID string, u UsageOptions) (usageRecord, error) {
	if err := structs.ValidateID("volume_id", volID); err != nil {
		return usageRecord{}, err
	}
	if err := structs.ValidateID("alloc_id", allocID); err != nil {
		return usageRecord{}, err
	}
	if err := u.validate(); err != nil {
		return usageRecord{}, err
	}
	return usageRecord{
		PluginID:       m.cfg.PluginID,
		VolumeID:       volID,
		ExternalID:     externalID,
		AllocID:        allocID,
		ReadOnly:       u.ReadOnly,
		AccessMode:     u.AccessMode,
		AttachmentMode: u.AttachmentMode,
		StagingPath:    StagingPath(m.cfg.Root, m.cfg.PluginID, volID, u),
		TargetPath:     PublishPath(m.cfg.Root, allocID, volID, u),
	}, nil
}

func (m *MountManager) takeUsage(r usageRecord) error {
	m.mu.Lock()
	_, known := m.usages[r.VolumeID][r.TargetPath]
	m.mu.Unlock()
	if known {
		return nil
	}
	if !m.cfg.CallerRecordsUsage {
		if err := writeUsage(r); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.addUsageLocked(r)
	m.mu.Unlock()
	return nil
}

func (m *MountManager) addUsageLocked(r usageRecord) {
	if m.usages[r.VolumeID] == nil {
		m.usages[r.VolumeID] = make(map[string]usageRecord)
	}
	m.usages[r.VolumeID][r.TargetPath] = r
}

func (m *MountManager) dropUsage(r usageRecord) error {
	if err := removeUsage(r.TargetPath); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.usages[r.VolumeID], r.TargetPath)
	if len(m.usages[r.VolumeID]) == 0 {
		delete(m.usages, r.VolumeID)
	}
	return nil
}

func (m *MountManager) stagingUsers(volID, stagingPath string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.usages[volID] {
		if r.StagingPath == stagingPath {
			n++
		}
	}
	return n
}

func (m *MountManager) isStaged(p string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.staged[p]
}

func (m *MountManager) setStaged(p string, staged bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if staged {
		m.staged[p] = true
	} else {
		delete(m.staged, p)
	}
}

// removeEmpty removes each path in order if it is an empty directory (or a
// dangling entry a plugin left), stopping at the first that is not.
func removeEmpty(paths ...string) {
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return
		}
	}
}
