package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/version"
)

// Agent is a running client agent.
type Agent struct {
	cfg    Config
	logger hclog.Logger
	ident  identity
	conn   *serverConn

	plugins *csi.Manager

	mountsMu sync.Mutex
	mounts   map[string]*csi.MountManager // by plugin ID

	// fpChanged wakes the heartbeat loop to re-register with new
	// fingerprints.
	fpChanged chan struct{}

	lease *nodeLease
	held  *heldClaims
	fence *fencer
	// leaseFile publishes the lease for claimd exec and the keeper.
	leaseFile *leasePublisher

	allocs   *allocRunner
	statuses *statusBatcher
	// registeredCh is closed once the node first registered.
	registeredCh   chan struct{}
	registeredOnce sync.Once
	// heartbeatOK: the last register or heartbeat succeeded (Health).
	heartbeatOK atomic.Bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// identity is the node's ID and secret, kept in the data dir so that a
// restarted agent is the same node.
type identity struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// New starts an agent: plugins are probed, the node registers, and
// allocations run.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	ident, err := loadIdentity(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{
		cfg:          cfg,
		logger:       cfg.Logger.Named("client").With("node", ident.ID),
		ident:        ident,
		mounts:       map[string]*csi.MountManager{},
		fpChanged:    make(chan struct{}, 1),
		ctx:          ctx,
		registeredCh: make(chan struct{}),
		cancel:       cancel,
	}
	a.conn = newServerConn(a, cfg.Servers)
	a.lease = newNodeLease(cfg.NodeLease, newLeaseClock(cfg.ClockRate))
	// Read before this run publishes its own: the predecessor's lease.
	startup := readStartupLease(cfg.DataDir, ident.ID)
	if a.lease.enabled() && startup.live {
		a.lease.adopt(startup.remaining)
	}
	if a.held, err = loadHeldClaims(cfg.DataDir); err != nil {
		cancel()
		return nil, err
	}
	fenceTimeout := cfg.FenceTimeout
	if fenceTimeout == 0 {
		fenceTimeout = DefaultFenceTimeout(cfg.NodeLease)
	}
	if a.fence, err = newFencer(a, a.lease, a.held, cfg.FenceCommand, fenceTimeout); err != nil {
		cancel()
		return nil, err
	}
	a.fence.startup = startup
	a.leaseFile = newLeasePublisher(a)
	a.held.onChange = a.leaseFile.publish
	a.leaseFile.publish()
	a.plugins, err = csi.NewManager(csi.ManagerConfig{
		Plugins:       cfg.Plugins,
		ProbeInterval: cfg.ProbeInterval,
		// A plugin call is bounded by the operation that makes it (a
		// mount, a server's detach with its budget), not by the probe's
		// few seconds.
		CallTimeout: callTimeout,
		OnChange:    func([]csi.PluginFingerprint) { a.wakeHeartbeat() },
		Logger:      a.logger,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	a.allocs = newAllocRunner(a)
	a.statuses = newStatusBatcher(a)
	// The first fingerprint round runs before registering, so the servers
	// never see this node without its plugins.
	a.plugins.Refresh(ctx)
	a.plugins.Start()
	// The fence loop runs the start-up fence first; the heartbeat loop
	// registers the node only after it (startupDone).
	a.goFunc(a.fence.run)
	a.goFunc(a.fence.checkLoop)
	a.goFunc(a.heartbeatLoop)
	a.goFunc(a.allocs.run)
	a.goFunc(a.statuses.run)
	a.goFunc(a.usageLoop)
	a.goFunc(a.pluginSocketLoop)
	a.logger.Info("client agent started", "name", cfg.NodeName, "plugins", len(cfg.Plugins), "node_lease", cfg.NodeLease)
	return a, nil
}

func (a *Agent) goFunc(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// NodeID is this node's ID.
func (a *Agent) NodeID() string { return a.ident.ID }

// Shutdown stops the agent. Allocations are left as they are: mounts stay,
// and the servers keep the claims (a restarted agent picks them up). The
// lease file keeps the deadline of the last renewal: claimd exec and the
// keeper stop the fence-policy workloads then unless an agent is back and
// renewed it (shutdown.go says when).
func (a *Agent) Shutdown() {
	a.warnStopWithFenceClaims()
	a.cancel()
	a.conn.close()
	a.wg.Wait()
	a.allocs.wait()
	a.plugins.Stop()
}

func (a *Agent) wakeHeartbeat() {
	select {
	case a.fpChanged <- struct{}{}:
	default:
	}
}

func loadIdentity(dir, override string) (identity, error) {
	path := filepath.Join(dir, "node-identity.json")
	var id identity
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &id); err != nil {
			return id, fmt.Errorf("read %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return id, err
	}
	changed := false
	if override != "" && id.ID != override {
		id.ID, changed = override, true
	}
	if id.ID == "" {
		id.ID, changed = randomID(), true
	}
	if id.Secret == "" {
		id.Secret, changed = randomID(), true
	}
	if changed {
		b, _ := json.Marshal(id)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return id, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return id, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// node builds the node as registered: identity plus fingerprints.
func (a *Agent) node() *structs.Node {
	report, _ := a.fence.pendingReport()
	n := &structs.Node{
		ID: a.ident.ID, Name: a.cfg.NodeName, SecretID: a.ident.Secret, Status: structs.NodeStatusReady,
		Version: version.Get().Version,
		Lease:   a.cfg.NodeLease, LastFence: report,
		CSINodePlugins: map[string]*structs.CSIInfo{}, CSIControllerPlugins: map[string]*structs.CSIInfo{},
	}
	for _, fp := range a.plugins.Fingerprints() {
		if ni := fp.NodeInfo(); ni != nil {
			n.CSINodePlugins[fp.ID] = ni
		}
		if ci := fp.ControllerInfo(); ci != nil {
			ci.ControllerCalls = a.controllerCalls(fp.ID)
			n.CSIControllerPlugins[fp.ID] = ci
		}
	}
	return n
}

// controllerCalls is the plugin's configured controller_calls.
func (a *Agent) controllerCalls(pluginID string) int {
	for _, pc := range a.cfg.Plugins {
		if pc.ID == pluginID {
			return pc.ControllerCalls
		}
	}
	return 0
}

// heartbeatLoop registers the node, then heartbeats within the TTL the
// servers give. It re-registers when fingerprints change or the session
// moves to another server (so that server binds this node's session).
//
// It starts once the start-up fence is over (fence_loop.go, run): until then
// the node is not registered, so it is not ready, and no allocation runs.
func (a *Agent) heartbeatLoop() {
	select {
	case <-a.fence.startupDone:
	case <-a.ctx.Done():
		return
	}
	registered := false
	// connectedOK: the last call went through; a first success, or one
	// after failures, has held claims checked with the servers.
	connectedOK := false
	ttl := 2 * time.Second
	for {
		connected := a.conn.connectedCh()
		ctx, cancel := context.WithTimeout(a.ctx, a.lease.callTimeout())
		var resp structs.NodeUpdateResponse
		var err error
		// The lease counts from the send: the servers' clock starts
		// later, when the heartbeat arrives.
		sentAt := a.lease.clock.now()
		sentBoot := leasefile.Now()
		var sentFence *structs.FenceReport
		var sentSeq uint64
		if !registered {
			node := a.node()
			sentFence, sentSeq = a.fence.pendingReport()
			node.LastFence = sentFence
			err = a.conn.call(ctx, "Node.Register", &structs.NodeRegisterRequest{Node: node}, &resp)
		} else {
			err = a.conn.call(ctx, "Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: a.ident.ID, Status: structs.NodeStatusReady}, &resp)
		}
		cancel()
		wait := a.lease.heartbeatEvery(ttl)
		if err != nil {
			if a.ctx.Err() != nil {
				return
			}
			logRetry(a.logger, err, "heartbeat failed; retrying", "registered", registered, "error", err)
			a.heartbeatOK.Store(false)
			registered = false
			connectedOK = false
			wait = 500 * time.Millisecond
			if after, ok := structs.RetryAfter(err); ok {
				// The servers have no room for a new node now (its
				// certificate's rate): come back when they say.
				wait = after
			}
			// A server that cannot reach a leader cannot keep this node
			// alive: move to the next server before the TTL runs out.
			if errors.Is(err, structs.ErrNoLeader) || errors.Is(err, structs.ErrTimeout) {
				a.conn.rotate()
			}
		} else {
			registered = true
			a.heartbeatOK.Store(true)
			if length := a.lease.renew(sentAt, resp.Lease); length > 0 {
				a.leaseFile.renewed(sentBoot, length)
			}
			a.fence.reported(sentFence, sentSeq)
			a.registeredOnce.Do(func() { close(a.registeredCh) })
			if !connectedOK {
				connectedOK = true
				a.fence.requestCheck()
			}
			if resp.HeartbeatTTL > 0 {
				ttl = resp.HeartbeatTTL
				wait = a.lease.heartbeatEvery(ttl)
			}
			a.conn.setServers(resp.Servers)
		}
		select {
		case <-time.After(wait):
		case <-a.fpChanged:
			registered = false
		case <-connected:
			registered = false
		case <-a.ctx.Done():
			return
		}
	}
}

// mountManager returns the mount manager of a node plugin configured here.
func (a *Agent) mountManager(pluginID string) (*csi.MountManager, error) {
	a.mountsMu.Lock()
	defer a.mountsMu.Unlock()
	if m, ok := a.mounts[pluginID]; ok {
		return m, nil
	}
	var fp *csi.PluginFingerprint
	for _, f := range a.plugins.Fingerprints() {
		if f.ID == pluginID {
			f := f
			fp = &f
		}
	}
	if fp == nil || !fp.Type.HasNode() {
		return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("node plugin %q is not configured on this node", pluginID))
	}
	if !fp.Healthy && fp.NodeExternalID == "" {
		// Never fingerprinted: we do not know whether it stages.
		return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("node plugin %q is not healthy: %s", pluginID, fp.HealthDescription))
	}
	client, _ := a.plugins.Client(pluginID)
	// The held-claims record is the usage record: a claim is on it
	// (synced) before its volume is mounted and leaves it only once the
	// volume is unmounted (mountHeld, NodeDetachVolume, the fence), which
	// is what the manager's count of a staged volume's users needs.
	var usages []csi.Usage
	for _, c := range a.held.list() {
		if c.PluginID == pluginID {
			usages = append(usages, csi.Usage{VolumeID: c.VolumeID, ExternalID: c.ExternalID, AllocID: c.AllocID, Options: c.usage()})
		}
	}
	m, err := csi.NewMountManager(csi.MountManagerConfig{
		Root: filepath.Join(a.absDataDir(), "csi"), PluginID: pluginID, Plugin: client,
		RequiresStaging: fp.RequiresStaging, Logger: a.logger,
		CallerRecordsUsage: true, Usages: usages,
	})
	if err != nil {
		return nil, err
	}
	a.mounts[pluginID] = m
	return m, nil
}

func (a *Agent) absDataDir() string {
	if abs, err := filepath.Abs(a.cfg.DataDir); err == nil {
		return abs
	}
	return a.cfg.DataDir
}

// logRetry logs a failed call that will be retried: a warning, except
// when the server only has not applied this node's registration yet (a
// follower's stale read right after the node registered): that passes by
// itself, and at start it always happens once.
func logRetry(logger hclog.Logger, err error, msg string, args ...any) {
	if structs.IsNodeNotYetKnown(err) {
		logger.Debug(msg, args...)
		return
	}
	logger.Warn(msg, args...)
}
