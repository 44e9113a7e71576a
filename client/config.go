package client

import (
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/rpc"
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
}

func (c *Config) validate() error {
	if len(c.Servers) == 0 {
		return errors.New("at least one server address is required (-servers)")
	}
	if c.DataDir == "" {
		return errors.New("data dir is required (-data-dir)")
	}
	for _, p := range c.Plugins {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	return nil
}
