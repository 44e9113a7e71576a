package bench

import (
	"crypto/tls"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Mode is the workload a run drives.
type Mode string

const (
	// ModeClaim claims and releases distinct volumes: every caller loops
	// claim(alloc_i, vol_i) → release(alloc_i, vol_i) on fresh pairs.
	ModeClaim Mode = "claim"
	// ModeContended has every caller race for a few single-node-writer
	// volumes, each with its own alloc per volume.
	ModeContended Mode = "contended"
	// ModeRelease claims N volumes, stops their allocs together and times
	// each claim from the stop until it is freed.
	ModeRelease Mode = "release"
	// ModeScale registers many simulated nodes and claims many volumes,
	// then measures the idle cluster and, optionally, a leader takeover
	// (scale.go).
	ModeScale Mode = "scale"
	// ModeHandoff has -volumes volumes of a real plugin change hands on a
	// real client node: a holder and a waiter on each, the holders stopped
	// together, the time until each waiter runs (handoff.go).
	ModeHandoff Mode = "handoff"
)

// Modes lists the modes in the order the help text shows them.
var Modes = []Mode{ModeClaim, ModeContended, ModeRelease, ModeScale, ModeHandoff}

// DefaultHandoffVolumes is one volume changing hands; -volumes 100 is the
// many-at-once case of issue 41.
const DefaultHandoffVolumes = 1

func (m Mode) valid() bool { return slices.Contains(Modes, m) }

// Targets a run may send its calls to, besides a literal address.
const (
	TargetLeader   = "leader"
	TargetFollower = "follower"
)

// Defaults per mode, used when the Config leaves a field zero.
var (
	// DefaultClaimVolumes sizes the claim pool: every claim+release uses
	// one (alloc, volume) pair once per run, so the pool bounds a run. 60k
	// pairs last 10 s at 12k claim calls/s (6k pairs/s), a little over
	// issue 7's target; a run that uses them all stops early and says so.
	DefaultClaimVolumes = 60000
	// DefaultContendedVolumes is few enough that 64 callers collide all
	// the time.
	DefaultContendedVolumes = 8
	// DefaultReleaseVolumes is the release pipeline's N (issue 5's figure).
	DefaultReleaseVolumes = 1000
	DefaultClaimCallers   = []int{1, 16, 64, 256}
	DefaultCallers        = []int{64}
)

// defaultDrainTimeout bounds the waits that cannot be skipped: the
// release run's own measurement and the final cleanup.
const defaultDrainTimeout = 5 * time.Minute

// PluginID is the node plugin the simulated node fingerprints and every
// bench volume uses.
const PluginID = "bench"

// maxBatch bounds the volumes or allocs sent in one registration request:
// 500 volumes are well under rpc.MaxRequestBytes and one Raft entry each.
const maxBatch = 500

// Config describes one invocation: a mode, run once for every target and
// every callers value.
type Config struct {
	// Addresses of one or more servers; the others are found through
	// Status.Peers.
	Addresses []string
	// Targets: "leader", "follower" or a server address, one run each.
	Targets []string
	Mode    Mode
	// Duration is the measured window of each run, after Warmup.
	Duration time.Duration
	Warmup   time.Duration
	// Volumes: claim pool size, contended volumes, or release N (0 = the
	// mode's default).
	Volumes int
	// Callers: one run per value (release mode: how many claim the N
	// volumes before the stop; only the largest value is used).
	Callers []int
	// Hold is how long a contended winner keeps its claim before releasing.
	Hold time.Duration
	// CallTimeout bounds one RPC (default 60 s, like the CLI).
	CallTimeout time.Duration
	// DrainTimeout bounds each wait for the servers to free the claims
	// released: after every claim or contended run (0 = do not wait; the
	// next run takes fresh pairs), and in release mode the measured
	// release itself (0 = 5 min). The final cleanup waits as long, or 5 min
	// when it is 0.
	DrainTimeout time.Duration
	// Scale mode: how many simulated nodes (0 = DefaultScaleNodes) over
	// how many shared sessions (0 = one per 100 nodes); the pause before
	// the idle window and the window; and whether to kill the leader
	// afterwards and time the takeover (needs the servers on this
	// machine).
	Nodes        int
	NodeSessions int
	Settle       time.Duration
	Idle         time.Duration
	Takeover     bool
	// PauseFile, when set, makes scale mode wait after the idle window,
	// its nodes heartbeating, until this file exists.
	PauseFile string
	// KeepState skips the final cleanup (deregistering volumes and node).
	KeepState bool
	// ServersDetach (claim and contended modes): the simulated node's
	// releases do not say it node-detached the claim, so the servers drive
	// a node detach per release, as they do for an agent older than the
	// statement (decision 61). By default a release carries the statement,
	// as an agent's terminal report does; it is true here: the simulated
	// node mounts nothing.
	ServersDetach bool
	// HandoffNode is the client node (ID, unique ID prefix or name) the
	// handoff mode places its allocations on (default: the first ready
	// node with HandoffPlugin healthy); HandoffPlugin the plugin of its
	// volumes (default hostdir); Rounds how many handoffs of every volume
	// it times (default 5).
	HandoffNode   string
	HandoffPlugin string
	Rounds        int
	// Prefix starts every ID the run creates (default "bench-" and 8 random
	// hex digits).
	Prefix string
	// Token is the ACL token's secret of the tool's own setup and reads
	// (registering volumes, placing and stopping allocs, listing evals,
	// the cleanup) and of the simulated node's first registration, as a
	// client agent's -acl-token. Empty when the cluster runs without ACLs.
	// Claims never use it: callers claim with the simulated node's secret,
	// as the node's agent would.
	Token string
	// TLS, when set, makes every connection mutual TLS: the tool's, the
	// callers' and the simulated node's session (tlsutil.ClientConfigFromFiles
	// builds it from -ca-cert, -client-cert and -client-key).
	TLS *tls.Config
	// Progress receives one line per setup step (nil = discard).
	Progress io.Writer
	Logger   hclog.Logger
}

func (c *Config) setDefaults() error {
	if len(c.Addresses) == 0 {
		return fmt.Errorf("at least one server address is required")
	}
	if c.Mode == "" {
		c.Mode = ModeClaim
	}
	if !c.Mode.valid() {
		return fmt.Errorf("mode %q is not one of %v", c.Mode, Modes)
	}
	if len(c.Targets) == 0 {
		c.Targets = []string{TargetLeader}
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Warmup < 0 {
		return fmt.Errorf("warmup %s is negative", c.Warmup)
	}
	if c.Volumes < 0 {
		return fmt.Errorf("volumes %d is negative", c.Volumes)
	}
	if c.Volumes == 0 {
		switch c.Mode {
		case ModeClaim:
			c.Volumes = DefaultClaimVolumes
		case ModeContended:
			c.Volumes = DefaultContendedVolumes
		case ModeRelease:
			c.Volumes = DefaultReleaseVolumes
		case ModeScale:
			c.Volumes = DefaultScaleVolumes
		case ModeHandoff:
			c.Volumes = DefaultHandoffVolumes
		}
	}
	if len(c.Callers) == 0 {
		c.Callers = DefaultCallers
		if c.Mode == ModeClaim {
			c.Callers = DefaultClaimCallers
		}
	}
	for _, n := range c.Callers {
		if n <= 0 {
			return fmt.Errorf("callers %d: must be at least 1", n)
		}
	}
	if c.Nodes < 0 || c.NodeSessions < 0 {
		return fmt.Errorf("nodes %d and node sessions %d must not be negative", c.Nodes, c.NodeSessions)
	}
	if c.Mode == ModeScale {
		c.scaleDefaults()
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 60 * time.Second
	}
	if c.DrainTimeout < 0 {
		return fmt.Errorf("drain timeout %s is negative", c.DrainTimeout)
	}
	if c.Prefix == "" {
		c.Prefix = "bench-" + randomHex(4)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return nil
}
