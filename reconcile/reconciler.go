package reconcile

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// DefaultInterval is how often the leader reconciles each plugin.
const DefaultInterval = time.Minute

// StateSource gives the current state store (it changes on restore).
type StateSource interface {
	State() *fsm.StateStore
}

// Applier commits log entries (the server).
type Applier interface {
	Apply(t structs.MessageType, msg any) (any, uint64, error)
}

// Controllers delivers a controller call to a healthy controller of a
// plugin, wherever its node's session is (attachment.Manager).
type Controllers interface {
	ControllerCall(method string, q *structs.CSIControllerQuery, routing *structs.NodeRouting,
		args, reply any, answered func(node string)) error
}

// Reconciler is the leader duty that compares each plugin's storage with
// claimd's record every interval, and on demand (Run).
type Reconciler struct {
	state  StateSource
	apply  Applier
	ctrl   Controllers
	logger hclog.Logger

	mu       sync.Mutex
	interval time.Duration
	enabled  bool
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	reset    chan struct{}
	// rounds serialises rounds of one plugin (the timer's and an
	// operator's), so two never interleave their before/after reads.
	rounds map[string]*sync.Mutex
}

// New makes a reconciler; interval 0 is DefaultInterval, negative is off
// (rounds then run only on demand).
func New(state StateSource, apply Applier, ctrl Controllers, interval time.Duration, logger hclog.Logger) *Reconciler {
	if interval == 0 {
		interval = DefaultInterval
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Reconciler{state: state, apply: apply, ctrl: ctrl, interval: interval,
		logger: logger.Named("reconcile"), rounds: map[string]*sync.Mutex{}, reset: make(chan struct{}, 1)}
}

// SetInterval changes the interval (SIGHUP); the next round is one new
// interval away.
func (r *Reconciler) SetInterval(d time.Duration) {
	if d == 0 {
		d = DefaultInterval
	}
	r.mu.Lock()
	r.interval = d
	r.mu.Unlock()
	select {
	case r.reset <- struct{}{}:
	default:
	}
}

// SetEnabled implements the server's LeaderDuty.
func (r *Reconciler) SetEnabled(enabled bool) {
	r.mu.Lock()
	if enabled == r.enabled {
		r.mu.Unlock()
		return
	}
	r.enabled = enabled
	if !enabled {
		r.cancel()
		r.mu.Unlock()
		r.wg.Wait()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.loop(ctx)
	}()
}

func (r *Reconciler) loop(ctx context.Context) {
	for {
		r.mu.Lock()
		interval := r.interval
		r.mu.Unlock()
		var tick <-chan time.Time
		var timer *time.Timer
		if interval > 0 {
			timer = time.NewTimer(interval)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-r.reset:
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-tick:
		}
		for _, id := range r.Plugins() {
			if ctx.Err() != nil {
				return
			}
			if _, err := r.Run(ctx, id); err != nil && ctx.Err() == nil {
				r.logger.Warn("reconciliation round not recorded", "plugin", id, "error", err)
			}
		}
	}
}

// Plugins lists the plugins that have a controller (a node-only plugin
// has no storage-side attachments to compare).
func (r *Reconciler) Plugins() []string {
	ps, err := r.state.State().Plugins(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range ps {
		if len(p.Controllers) > 0 {
			out = append(out, p.ID)
		}
	}
	return out
}

func (r *Reconciler) roundLock(pluginID string) *sync.Mutex {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.rounds[pluginID]
	if m == nil {
		m = &sync.Mutex{}
		r.rounds[pluginID] = m
	}
	return m
}

// Run reconciles one plugin now and records the round in Raft. The
// returned report is what was recorded.
func (r *Reconciler) Run(ctx context.Context, pluginID string) (*structs.StorageReport, error) {
	lock := r.roundLock(pluginID)
	lock.Lock()
	defer lock.Unlock()
	report, err := r.round(pluginID)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// Advisory: a server of an older version may skip the entry.
	_, index, err := r.apply.Apply(structs.StorageReportRequestType|structs.IgnoreUnknownTypeFlag,
		&structs.StorageReportRequest{Report: report})
	if err != nil {
		return nil, err
	}
	report.ModifyIndex = index
	emit(report)
	return report, nil
}

// round does one comparison; an error here means nothing can be recorded
// (the plugin is unknown), while a storage that cannot be asked is a
// report with Error set.
func (r *Reconciler) round(pluginID string) (*structs.StorageReport, error) {
	state := r.state.State()
	plug, err := state.PluginByID(nil, pluginID)
	if err != nil {
		return nil, err
	}
	if plug == nil {
		return nil, structs.NotFound("plugin", pluginID)
	}
	now := time.Now().UTC()
	report := &structs.StorageReport{PluginID: pluginID, CheckedAt: now}
	if why := unsupported(plug); why != "" {
		report.Unsupported = why
		return report, nil
	}
	prev, err := state.StorageReport(nil, pluginID)
	if err != nil {
		return nil, err
	}
	before, err := state.Volumes(nil, pluginID)
	if err != nil {
		return nil, err
	}
	args := &structs.ClientCSIControllerListVolumesRequest{CSIControllerQuery: structs.CSIControllerQuery{PluginID: pluginID}}
	var reply structs.ClientCSIControllerListVolumesResponse
	err = r.ctrl.ControllerCall("ClientCSI.ControllerListVolumes", &args.CSIControllerQuery, &args.NodeRouting, args, &reply,
		func(node string) { reply.ControllerNodeID = node })
	if err != nil {
		report.Error = truncate(fmt.Sprintf("listing the storage failed: %v", err))
		metrics.IncrCounterWithLabels([]string{"reconcile", "failures"}, 1, []metrics.Label{{Name: "plugin", Value: pluginID}})
		return report, nil
	}
	after, err := r.state.State().Volumes(nil, pluginID)
	if err != nil {
		return nil, err
	}
	nodes := map[string]string{}
	for id, info := range plug.Nodes {
		if info.ExternalNodeID != "" {
			nodes[info.ExternalNodeID] = id
		}
	}
	report.ControllerNodeID = reply.ControllerNodeID
	report.Volumes = len(reply.Volumes)
	if !reply.PublishedNodes {
		report.Unsupported = fmt.Sprintf("the controller of plugin %q does not report published nodes (LIST_VOLUMES_PUBLISHED_NODES): only unknown volumes are found", pluginID)
	}
	report.Findings, report.Known, report.UnknownTruncated = Compare(Input{
		PluginID: pluginID, Before: before, After: after, Listed: reply.Volumes, Nodes: nodes,
		PublishedNodes: reply.PublishedNodes, Previous: prev, Now: now})
	return report, nil
}

// unsupported says why a plugin's storage cannot be listed, or "".
func unsupported(p *structs.Plugin) string {
	for _, c := range p.Controllers {
		if c.Healthy && c.ControllerCapabilities != nil && c.ControllerCapabilities.ListVolumes {
			return ""
		}
	}
	return fmt.Sprintf("no healthy controller of plugin %q offers LIST_VOLUMES", p.ID)
}

func truncate(s string) string {
	const max = 1024
	if len(s) > max {
		return s[:max]
	}
	return s
}

// emit publishes a round's findings as gauges by plugin and kind.
func emit(r *structs.StorageReport) {
	counts := map[structs.FindingKind]int{structs.FindingOrphan: 0, structs.FindingMissing: 0, structs.FindingUnknownVolume: r.UnknownTruncated}
	for _, f := range r.Findings {
		counts[f.Kind]++
	}
	for kind, n := range counts {
		metrics.SetGaugeWithLabels([]string{"reconcile", "findings"}, float32(n),
			[]metrics.Label{{Name: "plugin", Value: r.PluginID}, {Name: "kind", Value: string(kind)}})
	}
	metrics.IncrCounterWithLabels([]string{"reconcile", "rounds"}, 1, []metrics.Label{{Name: "plugin", Value: r.PluginID}})
}
