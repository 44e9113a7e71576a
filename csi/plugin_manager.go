package csi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultProbeInterval is how often the manager probes plugins when
// ManagerConfig.ProbeInterval is zero. Plugin health gates scheduling of new
// claims, so a few seconds of staleness is fine and a Probe every few
// seconds costs a plugin nothing.
const DefaultProbeInterval = 5 * time.Second

// DefaultProbeTimeout bounds each fingerprint call when
// ManagerConfig.ProbeTimeout is zero. Identity and capability calls answer
// from memory; a plugin slower than this is unhealthy.
const DefaultProbeTimeout = 5 * time.Second

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	Plugins       []PluginConfig
	ProbeInterval time.Duration
	// ProbeTimeout bounds each plugin's fingerprint in a round
	// (DefaultProbeTimeout when zero).
	ProbeTimeout time.Duration
	// CallTimeout bounds every other call made through the manager's
	// clients: stage, publish, their undoing, controller calls
	// (DefaultCallTimeout when zero). It used to be the probe's bound too,
	// which cut a stage or publish on real storage short at 5 s.
	CallTimeout time.Duration
	// OnChange receives every fingerprint (sorted by ID) after the first
	// round and after any round in which one of them changed. It is called
	// from the manager's goroutine or from Refresh's caller, never two at a
	// time; it should return quickly and must not call Stop.
	OnChange func([]PluginFingerprint)
	Logger   hclog.Logger
}

// Manager fingerprints and health-probes the CSI plugins configured on a
// node.
//
// Concurrency: every method is safe for concurrent use. Rounds of probing
// never overlap: the background loop and Refresh take turns. Stop ends the
// loop, waits for it, and closes the plugin clients; it is idempotent.
type Manager struct {
	cfg     ManagerConfig
	logger  hclog.Logger
	clients map[string]*Client

	roundMu  sync.Mutex // serialises rounds and OnChange calls
	reported bool       // OnChange has been called at least once

	mu  sync.Mutex // guards fps
	fps map[string]PluginFingerprint

	ctx      context.Context
	cancel   context.CancelFunc
	startMu  sync.Mutex
	started  bool
	loopDone chan struct{}
	stopOnce sync.Once
}

// NewManager validates the configuration and prepares one client per
// plugin. It does no I/O; Start begins probing.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := &Manager{
		cfg:      cfg,
		logger:   cfg.Logger.Named("csi.plugins"),
		clients:  make(map[string]*Client),
		fps:      make(map[string]PluginFingerprint),
		loopDone: make(chan struct{}),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for _, pc := range cfg.Plugins {
		if err := pc.Validate(); err != nil {
			m.closeClients()
			return nil, err
		}
		if _, dup := m.clients[pc.ID]; dup {
			m.closeClients()
			return nil, fmt.Errorf("csi plugin %q configured twice", pc.ID)
		}
		c, err := NewClient(pc.Socket, ClientOptions{PluginID: pc.ID, Timeout: cfg.CallTimeout, Logger: m.logger})
		if err != nil {
			m.closeClients()
			return nil, err
		}
		m.clients[pc.ID] = c
		m.fps[pc.ID] = PluginFingerprint{ID: pc.ID, Type: pc.Type, Endpoint: pc.Socket,
			HealthDescription: "not fingerprinted yet"}
	}
	return m, nil
}

// Start launches the probe loop; its first round runs at once. Calling it
// again, or after Stop, does nothing.
func (m *Manager) Start() {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if m.started || m.ctx.Err() != nil {
		return
	}
	m.started = true
	go m.loop()
}

// Stop ends probing and closes the clients. It waits for a round in
// progress, which its cancellation cuts short.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.cancel()
		m.startMu.Lock()
		started := m.started
		m.started = true // a Start racing with Stop must not launch the loop
		m.startMu.Unlock()
		if started {
			<-m.loopDone
		}
		// A Refresh may still be running; wait for it before closing the
		// clients it uses.
		m.roundMu.Lock()
		m.closeClients()
		m.roundMu.Unlock()
	})
}

func (m *Manager) closeClients() {
	for _, c := range m.clients {
		_ = c.Close()
	}
}

// Client returns the client of a configured plugin, for the agent's CSI
// calls. It must not be closed by the caller and stops working after Stop.
func (m *Manager) Client(pluginID string) (*Client, bool) {
	c, ok := m.clients[pluginID]
	return c, ok
}

// Fingerprints returns the latest fingerprints, sorted by plugin ID.
func (m *Manager) Fingerprints() []PluginFingerprint {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sortedLocked()
}

func (m *Manager) sortedLocked() []PluginFingerprint {
	out := make([]PluginFingerprint, 0, len(m.fps))
	for _, fp := range m.fps {
		out = append(out, fp)
	}
	slices.SortFunc(out, func(a, b PluginFingerprint) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Refresh runs a round now, outside the interval, and returns the result.
// ctx bounds the round; after Stop it returns the last fingerprints.
func (m *Manager) Refresh(ctx context.Context) []PluginFingerprint {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.ctx, cancel)
	defer stop()
	m.round(ctx)
	return m.Fingerprints()
}

func (m *Manager) loop() {
	defer close(m.loopDone)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-timer.C:
		}
		m.round(m.ctx)
		timer.Reset(m.cfg.ProbeInterval)
	}
}

// round probes every plugin in parallel, so one hung plugin delays the
// others by at most its call timeout, then reports if anything changed.
func (m *Manager) round(ctx context.Context) {
	m.roundMu.Lock()
	defer m.roundMu.Unlock()
	// m.ctx is checked too: Refresh's context learns of Stop only through
	// context.AfterFunc, which runs asynchronously.
	if ctx.Err() != nil || m.ctx.Err() != nil {
		return
	}

	m.mu.Lock()
	prev := make(map[string]PluginFingerprint, len(m.fps))
	for id, fp := range m.fps {
		prev[id] = fp
	}
	m.mu.Unlock()

	results := make([]PluginFingerprint, len(m.cfg.Plugins))
	var wg sync.WaitGroup
	for i, pc := range m.cfg.Plugins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, m.cfg.ProbeTimeout)
			defer cancel()
			old := prev[pc.ID]
			if old.Healthy {
				// Static facts were learnt when it became healthy; while
				// it stays healthy a Probe is enough.
				results[i] = probe(ctx, m.clients[pc.ID], old)
			} else {
				// Unknown or recovering: learn everything again, since a
				// plugin that comes back may be a different version.
				results[i] = fingerprint(ctx, m.clients[pc.ID], pc, old)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Results cut short by Stop or by Refresh's caller say nothing
		// about the plugins; do not report them.
		return
	}

	changed := !m.reported
	m.mu.Lock()
	for _, fp := range results {
		if !fp.Equal(prev[fp.ID]) {
			changed = true
			if fp.Healthy != prev[fp.ID].Healthy {
				m.logger.Info("plugin health changed", "plugin", fp.ID, "healthy", fp.Healthy, "description", fp.HealthDescription)
			}
		}
		m.fps[fp.ID] = fp
	}
	snapshot := m.sortedLocked()
	m.mu.Unlock()

	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(snapshot)
	}
	m.reported = true
}
