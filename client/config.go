package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Config configures a client agent.
type Config struct {
	// Servers to connect to, tried in order (the servers' answers extend
	// the list with every Raft member).
	Servers []string
	// DataDir keeps the node ID and secret, and the CSI mount paths.
	DataDir  string
	NodeName string
	// NodeID overrides the ID kept in the data dir (tests, dev mode).
	NodeID  string
	Plugins []csi.PluginConfig
	// ProbeInterval is how often plugins are health-checked.
	ProbeInterval time.Duration
	Logger        hclog.Logger
	Dialer        rpc.Dialer
	// TLS, when set, makes every connection to the servers TLS, with this
	// agent's client certificate, and checks the servers' certificates.
	TLS *tlsutil.Configurator
	// TLSAllowPlaintext falls back to plaintext towards a server that does
	// not speak TLS yet (the migration mode; see rpc.TLSDialer).
	TLSAllowPlaintext bool
	// RegisterToken is an ACL token that grants node:write, used only to
	// register this node the first time when ACLs are on and TLS is off
	// (with TLS, the client certificate is enough). Every other call
	// authenticates with the node's own secret.
	RegisterToken string
	// NodeLease is the lease this node holds (decision 39): 0 holds none
	// (volumes under the fence policy then wait like wait-policy ones).
	NodeLease time.Duration
	// FenceCommand runs, through /bin/sh -c, before each fence-policy
	// volume is unmounted in a fence, with CLAIMD_ALLOC_ID,
	// CLAIMD_VOLUME_ID, CLAIMD_MOUNT_PATH and CLAIMD_NODE_ID set: it should
	// stop whatever writes through the mount.
	FenceCommand string
	// FenceTimeout bounds one run of FenceCommand: its whole process group
	// is killed when it runs out (internal/fencecmd). 0: half the fence
	// budget (FenceBudget); otherwise above 0 and below the budget, so the
	// unmount still fits before the lease runs out.
	FenceTimeout time.Duration
	// OwnDetachTimeout bounds the agent's own unmount of one volume at an
	// allocation's stop, retries included (decision 61): past it the stop
	// is reported without that volume and the servers' node detach does
	// it. 0: DefaultOwnDetachTimeout.
	OwnDetachTimeout time.Duration
	// ClockRate scales the lease clock against real time (tests of clock
	// drift only; 0 means 1).
	ClockRate float64
	// UsageInterval is how often the volumes held here are measured for
	// the claimd.client.volume.* gauges: 0 means a minute, negative never.
	UsageInterval time.Duration
}

func (c *Config) validate() error {
	if len(c.Servers) == 0 {
		return errors.New("at least one server address is required (-servers)")
	}
	if c.DataDir == "" {
		return errors.New("data dir is required (-data-dir)")
	}
	if err := structs.ValidateNodeLease("node_lease", c.NodeLease); err != nil {
		return err
	}
	if err := validateFenceTimeout(c.FenceTimeout, c.NodeLease); err != nil {
		return err
	}
	if c.OwnDetachTimeout < 0 {
		return structs.Invalid("own_detach_timeout", fmt.Sprintf("%s is negative: it must be above 0 (or 0 for the default, %s)", c.OwnDetachTimeout, DefaultOwnDetachTimeout))
	}
	if c.ClockRate < 0 || c.ClockRate > 0 && (c.ClockRate < 0.5 || c.ClockRate > 2) {
		return structs.Invalid("clock_rate", fmt.Sprintf("%g is not between 0.5 and 2", c.ClockRate))
	}
	for _, p := range c.Plugins {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// FenceBudget is how long before the node lease runs out the agent starts
// to fence: enough to run the hook and unmount, but a small part of the
// lease so that ordinary heartbeat delays do not fence a healthy node.
// Without a lease (0) it is the longest budget any lease gets: it then
// bounds only the fences of claims the servers released (fence_check.go).
func FenceBudget(lease time.Duration) time.Duration {
	if lease <= 0 {
		return maxFenceBudget
	}
	return min(lease/4, maxFenceBudget)
}

const maxFenceBudget = 10 * time.Second

// DefaultFenceTimeout is the fence command's bound when none is given:
// half the budget, the other half is the unmount's.
func DefaultFenceTimeout(lease time.Duration) time.Duration { return FenceBudget(lease) / 2 }

// validateFenceTimeout checks -fence-timeout against the budget of the
// lease: a command allowed to run past it would let the lease run out
// before the unmount, with the writer perhaps still running.
func validateFenceTimeout(timeout, lease time.Duration) error {
	if timeout == 0 {
		return nil
	}
	budget := FenceBudget(lease)
	if timeout < 0 {
		return structs.Invalid("fence_timeout", fmt.Sprintf("%s is negative: it must be above 0 (or 0 for the default, half the fence budget: %s)", timeout, budget/2))
	}
	if timeout >= budget {
		return structs.Invalid("fence_timeout", fmt.Sprintf("%s is not below the fence budget %s (a quarter of node_lease %s, at most %s): the unmount must still fit before the lease runs out",
			timeout, budget, lease, maxFenceBudget))
	}
	return nil
}
