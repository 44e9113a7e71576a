package server

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Config configures a server.
type Config struct {
	// NodeName is the human name; defaults to the host name and the start
	// of the server ID, unique per data dir (defaultNodeName).
	NodeName string
	// DataDir holds the server ID, the Raft log and snapshots.
	DataDir string
	// BindAddr is the one RPC/Raft address (host:port; port 0 picks one).
	BindAddr string
	// AdvertiseAddr is the address peers dial; defaults to the bound one.
	AdvertiseAddr string
	// BootstrapExpect: form a new cluster once exactly this many servers
	// with empty logs know each other. 0 = never bootstrap (join only).
	BootstrapExpect int
	// Join lists addresses of other servers to exchange identities with.
	Join []string
	// JoinInterval is the pause between join attempts.
	JoinInterval time.Duration
	// RaftMultiplier scales Raft timeouts (1 = production).
	RaftMultiplier float64
	// RaftLogStore is raftnode.LogStoreBoltDB or LogStoreWAL; "" keeps
	// what the data dir holds, else raftnode.DefaultLogStore.
	RaftLogStore string
	// SnapshotThreshold / TrailingLogs / SnapshotInterval tune Raft
	// snapshots (0 = defaults); tests lower them to force snapshots.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
	// WALSegmentSize is raft-wal's segment size in bytes (0: its default,
	// 64 MiB). raft-wal drops compacted entries a segment at a time, so
	// tests that need a follower sent a snapshot use small segments.
	WALSegmentSize int

	// HeartbeatTTL is how soon client nodes must heartbeat (0 = 10 s).
	HeartbeatTTL time.Duration
	// Release tunes the leader's release workers (zero values = defaults).
	ReleaseWorkers     int
	ReleaseBackoffBase time.Duration
	ReleaseBackoffMax  time.Duration
	// ClaimGCInterval is how often the claim GC runs (0 = 5 min).
	ClaimGCInterval time.Duration
	// ReconcileInterval is how often the leader compares each plugin's
	// storage with claimd's record (0 = 1 min, negative = only on demand).
	ReconcileInterval time.Duration
	// ReconcileRepairGrace is how long an orphan attachment of a
	// fence-policy volume is seen before it is detached (0 = 10 min).
	ReconcileRepairGrace time.Duration
	// StorageLease bounds every storage call the leader makes and how long
	// a new leader waits before its first (0 = leaderlease.Default;
	// decision 46).
	StorageLease time.Duration
	// Autopilot tunes the leader's Raft health checks and dead-server
	// cleanup (server/autopilot.go).
	Autopilot AutopilotConfig

	// TLS, when set, secures the port: incoming connections must be TLS
	// (unless TLSAllowPlaintext) and outgoing ones are.
	TLS *tlsutil.Configurator
	// TLSAllowPlaintext is the migration mode: accept plaintext beside TLS,
	// and fall back to plaintext towards a peer that does not speak TLS yet.
	TLSAllowPlaintext bool
	// TLSHandshakeTimeout bounds an incoming connection's TLS handshake
	// and its inner protocol byte, and how long its turn at the
	// per-address handshake pace may be (0: rpc.HandshakeTimeout). This
	// server's own dials keep rpc.HandshakeTimeout.
	TLSHandshakeTimeout time.Duration
	// ACLEnabled makes every endpoint check the caller's token.
	ACLEnabled bool

	Logger hclog.Logger
	// Dialer is used for every outbound connection (nil = TCP). The test
	// harness routes dials through partitionable links.
	Dialer rpc.Dialer
	// Listener, when set, is used instead of listening on BindAddr.
	Listener net.Listener
	// BeforeApply, when set, runs before the state machine applies each
	// entry (a test seam: holding it makes this server's state lag).
	BeforeApply func(index uint64)
}

// The TLS handshake bound an operator may set. Below a second a slow
// client on a loaded machine or a distant network (a handshake is two
// round trips and a signature each way) would be cut off; above five
// minutes a flood of silent handshakes holds its opening slots for that
// long (maxOpening), shutting others out.
const (
	MinTLSHandshakeTimeout = time.Second
	MaxTLSHandshakeTimeout = 5 * time.Minute
)

// ValidateTLSHandshakeTimeout refuses a bound outside
// MinTLSHandshakeTimeout..MaxTLSHandshakeTimeout (0 included), naming field.
func ValidateTLSHandshakeTimeout(field string, d time.Duration) error {
	if d < MinTLSHandshakeTimeout || d > MaxTLSHandshakeTimeout {
		return structs.Invalid(field, fmt.Sprintf("%s is outside %s to %s", d, MinTLSHandshakeTimeout, MaxTLSHandshakeTimeout))
	}
	return nil
}

// tlsHandshakeTimeout is the bound in force.
func (c *Config) tlsHandshakeTimeout() time.Duration {
	if c.TLSHandshakeTimeout == 0 {
		return rpc.HandshakeTimeout
	}
	return c.TLSHandshakeTimeout
}

func (c *Config) validate() error {
	if c.DataDir == "" {
		return errors.New("data dir is required (-data-dir)")
	}
	if c.BootstrapExpect < 0 {
		return errors.New("-bootstrap-expect must not be negative")
	}
	if c.TLSAllowPlaintext && c.TLS == nil {
		return errors.New("-tls-allow-plaintext needs TLS (-tls-ca-file, -tls-cert-file, -tls-key-file)")
	}
	if err := leaderlease.Validate("storage_lease", c.StorageLease); err != nil {
		return err
	}
	if c.TLSHandshakeTimeout != 0 {
		if err := ValidateTLSHandshakeTimeout("tls_handshake_timeout", c.TLSHandshakeTimeout); err != nil {
			return err
		}
	}
	if c.BindAddr == "" && c.Listener == nil {
		return errors.New("bind address is required (-bind)")
	}
	return nil
}
