package hostdir

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Mode says which CSI services the plugin serves.
type Mode string

const (
	ModeNode       Mode = "node"
	ModeController Mode = "controller"
	ModeMonolith   Mode = "monolith"
)

func (m Mode) hasNode() bool       { return m == ModeNode || m == ModeMonolith }
func (m Mode) hasController() bool { return m == ModeController || m == ModeMonolith }

// MountMethod says how staging and publishing present a volume directory.
type MountMethod string

const (
	// MountAuto bind-mounts when running as root and falls back to a
	// symlink when that is impossible or fails.
	MountAuto MountMethod = "auto"
	// MountBind bind-mounts and fails when it cannot.
	MountBind MountMethod = "bind"
	// MountSymlink always uses symlinks (what an unprivileged run gets).
	MountSymlink MountMethod = "symlink"
)

// DefaultName is the plugin name GetPluginInfo reports.
const DefaultName = "hostdir.csi.claimd.io"

// Version is the plugin's vendor version.
const Version = "0.1.0"

// Config configures a Plugin.
type Config struct {
	// Endpoint is where Start listens: "unix:///path" or a plain path.
	Endpoint string
	// Root holds the volumes and the plugin's shared state.
	Root string
	// NodeID is what NodeGetInfo reports; required for node and monolith.
	NodeID string
	// Mode defaults to monolith.
	Mode Mode
	// Name defaults to DefaultName.
	Name string
	// AutoCreateVolumes creates a volume's directory the first time any
	// call names a valid volume ID that does not exist yet.
	AutoCreateVolumes bool
	// MaxVolumes is NodeGetInfo's max_volumes_per_node; 0 means no limit.
	// A node plugin records it under Root, so that controllers refuse to
	// attach more volumes than that to the node.
	MaxVolumes int64
	// Topology is this process's topology segments: NodeGetInfo's
	// accessible_topology in node mode, and in controller mode where the
	// volumes it creates are reachable. Empty means the plugin has no
	// topology and ignores accessibility requirements.
	Topology map[string]string
	// Capacity, when positive, is the storage GetCapacity reports and
	// CreateVolume allocates quotas from; otherwise the free space of
	// Root's filesystem.
	Capacity int64
	// MountMethod defaults to MountAuto.
	MountMethod MountMethod
	// AuditLog is a file to append one JSON line per call to; none if empty.
	AuditLog string
	// ControlFile is read on every call for faults; none if empty.
	ControlFile string
	// Fail arms failures: the next N calls of each method fail with
	// Unavailable.
	Fail map[string]int
	// Delay delays every call of each method.
	Delay  map[string]time.Duration
	Logger hclog.Logger
}

// idPattern bounds volume and node IDs to safe single path elements: they
// become file names under Root.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func validID(id string) bool { return idPattern.MatchString(id) }

func (c *Config) setDefaults() error {
	if c.Mode == "" {
		c.Mode = ModeMonolith
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.MountMethod == "" {
		c.MountMethod = MountAuto
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	switch c.Mode {
	case ModeNode, ModeController, ModeMonolith:
	default:
		return fmt.Errorf("hostdir: mode %q is not node, controller or monolith", c.Mode)
	}
	switch c.MountMethod {
	case MountAuto, MountBind, MountSymlink:
	default:
		return fmt.Errorf("hostdir: mount method %q is not auto, bind or symlink", c.MountMethod)
	}
	if c.Root == "" {
		return fmt.Errorf("hostdir: root must be given")
	}
	if c.Mode.hasNode() && !validID(c.NodeID) {
		return fmt.Errorf("hostdir: node id %q must be 1-128 letters, digits, '.', '_' or '-'", c.NodeID)
	}
	if c.MaxVolumes < 0 || c.Capacity < 0 {
		return fmt.Errorf("hostdir: max volumes and capacity must not be negative")
	}
	for k, v := range c.Topology {
		if k == "" || v == "" {
			return fmt.Errorf("hostdir: topology segment %q=%q: key and value must not be empty", k, v)
		}
	}
	for m := range c.Fail {
		if !knownMethod(m) {
			return fmt.Errorf("hostdir: fail: unknown CSI method %q", m)
		}
	}
	for m := range c.Delay {
		if !knownMethod(m) {
			return fmt.Errorf("hostdir: delay: unknown CSI method %q", m)
		}
	}
	return nil
}

// socketPath accepts the same endpoint spellings as the claimd CSI client.
func socketPath(endpoint string) (string, error) {
	p := endpoint
	switch {
	case strings.HasPrefix(p, "unix://"):
		p = strings.TrimPrefix(p, "unix://")
	case strings.HasPrefix(p, "unix:"):
		p = strings.TrimPrefix(p, "unix:")
	case strings.Contains(p, "://"):
		return "", fmt.Errorf("hostdir: endpoint %q: only unix sockets are supported", endpoint)
	}
	if p == "" {
		return "", fmt.Errorf("hostdir: endpoint must name a socket path")
	}
	return p, nil
}
