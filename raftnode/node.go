package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Production timings at multiplier 1. They are hashicorp/raft's defaults,
// which suit a LAN; Multiplier scales all of them together so that tests can
// run a cluster with elections in tens of milliseconds (multiplier 0.1) and a
// slow WAN can stretch them (multiplier 3) without retuning each value.
const (
	baseHeartbeatTimeout   = 1000 * time.Millisecond
	baseElectionTimeout    = 1000 * time.Millisecond
	baseLeaderLeaseTimeout = 500 * time.Millisecond
	baseCommitTimeout      = 50 * time.Millisecond
)

// maxAppendEntries bounds entries per log write and per AppendEntries.
// Claim entries are small (a claim batch of 256 is under 64 KiB), so 256
// keeps a write well under a megabyte while letting a burst share one fsync.
const maxAppendEntries = 256

// Snapshots. A snapshot is cheap to take (go-memdb snapshots are
// copy-on-write; persisting 100k volumes takes about 0.7 s in the
// background) and costs a restarting server a restore plus a replay of
// every entry after it, so:
//   - defaultSnapshotThreshold: snapshot after 8,192 new entries. With group
//     commit an entry carries about 30 claims at load, so that is a
//     snapshot every few minutes at the highest rates measured here, and a
//     restart replays at most that many entries (each a batch).
//   - defaultTrailingLogs: keep 10,240 entries behind a snapshot, more than
//     the threshold, so a follower that was down for a restart (seconds:
//     hundreds of entries) catches up from the log instead of being sent a
//     full snapshot (95 MB at 100k volumes, about 2 s to restore).
//
// These are hashicorp/raft's defaults, chosen on purpose, set here so that
// they are visible and not changed by a library upgrade.
const (
	defaultSnapshotThreshold = 8192
	defaultTrailingLogs      = 10240
)

// logCacheSize keeps the newest entries in memory so that followers catching
// up and the FSM applying do not read them back from bolt.
const logCacheSize = 512

// Config configures one Raft member.
type Config struct {
	ID      string // stable server ID
	DataDir string // raft/ under it holds the log (wal/ or raft.db) and snapshots
	// Multiplier scales every timeout; 1 = production, <1 for tests.
	Multiplier float64
	// SnapshotThreshold and TrailingLogs: 0 = this package's defaults.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
	// LogStore is LogStoreBoltDB or LogStoreWAL; "" keeps what the data
	// dir holds, else DefaultLogStore.
	LogStore string
	// WALSegmentSize is raft-wal's segment size (0: its default).
	WALSegmentSize int
	Stream         *StreamLayer
	FSM            raft.FSM
	Logger         hclog.Logger
}

// Node is a running Raft member.
type Node struct {
	Raft      *raft.Raft
	Transport *raft.NetworkTransport
	// LeaderCh gets true when this node becomes leader and false when it
	// stops being leader. Buffered; the server must drain it.
	LeaderCh <-chan bool

	store     logStore
	snapshots raft.SnapshotStore
	// LogStore is the kind of log store opened (LogStoreBoltDB or
	// LogStoreWAL).
	LogStore string
	hadState bool
}

// New opens the stores and starts Raft. It does not bootstrap.
func New(cfg Config) (*Node, error) {
	if cfg.ID == "" || cfg.DataDir == "" || cfg.Stream == nil || cfg.FSM == nil {
		return nil, errors.New("raftnode: ID, DataDir, Stream and FSM are required")
	}
	if cfg.Multiplier <= 0 {
		cfg.Multiplier = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Logger = newPlainArgs(cfg.Logger)
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create raft dir: %w", err)
	}
	store, kind, err := openStore(dir, cfg.LogStore, cfg.WALSegmentSize, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cache, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, cfg.Logger.Named("snapshot"))
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	hadState, err := raft.HasExistingState(cache, store, snaps)
	if err != nil {
		store.Close()
		return nil, err
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = cfg.Logger
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * cfg.Multiplier) }
	rc.HeartbeatTimeout = scale(baseHeartbeatTimeout)
	rc.ElectionTimeout = scale(baseElectionTimeout)
	rc.LeaderLeaseTimeout = scale(baseLeaderLeaseTimeout)
	rc.CommitTimeout = scale(baseCommitTimeout)
	rc.SnapshotThreshold, rc.TrailingLogs = defaultSnapshotThreshold, defaultTrailingLogs
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	// Throughput: let the leader take every queued Apply at once (up to
	// MaxAppendEntries) into one log write, so one fsync serves them all,
	// and send followers up to that many entries per AppendEntries.
	rc.BatchApplyCh = true
	// Replication metrics carry the peer as a label (peer_id) only: the
	// legacy copies put the peer's ID in the metric's name, one family per
	// server, which no Prometheus query can aggregate.
	rc.NoLegacyTelemetry = true
	rc.MaxAppendEntries = maxAppendEntries
	// A removed server must not keep campaigning, but it should stay up so
	// that it can report and be shut down in order by its owner.
	rc.ShutdownOnRemove = false
	leaderCh := make(chan bool, 16)
	rc.NotifyCh = leaderCh

	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  cfg.Stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  cfg.Logger.Named("transport"),
	})
	r, err := raft.NewRaft(rc, cfg.FSM, cache, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	return &Node{Raft: r, Transport: trans, LeaderCh: leaderCh, store: store, snapshots: snaps, hadState: hadState, LogStore: kind}, nil
}

// HadState reports whether the node found a log or snapshot on disk when it
// started. Such a node belongs to a cluster and must never bootstrap.
func (n *Node) HadState() bool { return n.hadState }

// Bootstrap forms a new cluster with exactly these servers. Every server of
// the new cluster must call it with the same list.
func (n *Node) Bootstrap(servers []raft.Server) error {
	if n.hadState {
		return errors.New("raftnode: refusing to bootstrap a server that has state")
	}
	f := n.Raft.BootstrapCluster(raft.Configuration{Servers: servers})
	if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return err
	}
	return nil
}

// WriteRefusal says why this server's log store would refuse a write now
// for want of disk space (a *DiskFullError, naming the directory, what is
// free and what the store needs), or nil. It is cheap (one statfs) and
// clears by itself once the space is back.
func (n *Node) WriteRefusal() error { return n.store.writeRefusal() }

// Shutdown stops Raft and closes the stores.
func (n *Node) Shutdown() error {
	err := n.Raft.Shutdown().Error()
	n.Transport.Close()
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}
