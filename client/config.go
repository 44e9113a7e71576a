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
