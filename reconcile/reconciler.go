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

// DefaultRepairGrace is how long an orphan must have been seen, round
// after round, before it is detached: longer than any publish or detach
// that is merely slow, and long enough for an operator to look first.
const DefaultRepairGrace = 10 * time.Minute

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
	// DetachOrphan controller-detaches an attachment no claim explains,
	// under the lock a new claim's publish takes, refusing if any claim
	// on that node appeared.
	DetachOrphan(vol *structs.Volume, nodeID, externalNodeID string) error
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
	grace    time.Duration
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
	return &Reconciler{state: state, apply: apply, ctrl: ctrl, interval: interval, grace: DefaultRepairGrace,
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

// SetRepairGrace changes how long an orphan waits before it is detached
// (0 keeps the current grace).
func (r *Reconciler) SetRepairGrace(d time.Duration) {
	if d <= 0 {
		return
	}
	r.mu.Lock()
	r.grace = d
	r.mu.Unlock()
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
	repairs := r.repair(report)
	// Advisory: a server of an older version may skip the entry.
	_, index, err := r.apply.Apply(structs.StorageReportRequestType|structs.IgnoreUnknownTypeFlag,
		&structs.StorageReportRequest{Report: report, Repairs: repairs})
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
		PublishedNodes: reply.PublishedNodes, Health: reply.Health, Previous: prev, Now: now})
	return report, nil
}

// repair detaches the round's orphans that have been seen for the grace
// period on volumes whose node_lost policy is fence: their owners accepted
// that claimd detaches without a node's word once it has proof, and a
// grace of rounds that all found no claim there is that proof for an
// attachment nothing claims. Under wait and manual an orphan is reported
// and left to the operator. Each repair goes into the volume's history.
func (r *Reconciler) repair(report *structs.StorageReport) []*structs.VolumeRepair {
	r.mu.Lock()
	grace := r.grace
	r.mu.Unlock()
	now := time.Now().UTC()
	var out []*structs.VolumeRepair
	for _, f := range report.Findings {
		if f.Kind != structs.FindingOrphan || f.VolumeID == "" || now.Sub(f.FirstSeen) < grace {
			continue
		}
		vol, err := r.state.State().VolumeByID(nil, f.VolumeID)
		if err != nil || vol == nil || vol.NodeLost.OrWait() != structs.NodeLostFence {
			continue
		}
		log := r.logger.With("volume", vol.ID, "external_node", f.ExternalNodeID, "node", f.NodeID, "first_seen", f.FirstSeen)
		if err := r.ctrl.DetachOrphan(vol, f.NodeID, f.ExternalNodeID); err != nil {
			log.Warn("could not detach an orphan attachment; the next round tries again", "error", err)
			continue
		}
		log.Warn("detached an orphan attachment no claim explained")
		f.RepairedAt = now
		metrics.IncrCounterWithLabels([]string{"reconcile", "repairs"}, 1, []metrics.Label{{Name: "plugin", Value: report.PluginID}})
		out = append(out, &structs.VolumeRepair{VolumeID: vol.ID, Repair: &structs.StorageRepair{
			At: now, FirstSeen: f.FirstSeen, ExternalNodeID: f.ExternalNodeID, NodeID: f.NodeID}})
	}
	return out
}

// unsupported says why a plugin's storage cannot be listed, or "".
func unsupported(p *structs.Plugin) string {
	for id, c := range p.Controllers {
		// Only an admitted controller is asked (issue 38).
		if c.Healthy && p.ControllerAdmitted(id) && c.ControllerCapabilities != nil && c.ControllerCapabilities.ListVolumes {
			return ""
		}
	}
	return fmt.Sprintf("no admitted healthy controller of plugin %q offers LIST_VOLUMES", p.ID)
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
	counts := map[structs.FindingKind]int{structs.FindingOrphan: 0, structs.FindingMissing: 0,
		structs.FindingUnknownVolume: r.UnknownTruncated, structs.FindingAbnormal: 0}
	for _, f := range r.Findings {
		counts[f.Kind]++
	}
	for kind, n := range counts {
		metrics.SetGaugeWithLabels([]string{"reconcile", "findings"}, float32(n),
			[]metrics.Label{{Name: "plugin", Value: r.PluginID}, {Name: "kind", Value: string(kind)}})
	}
	metrics.IncrCounterWithLabels([]string{"reconcile", "rounds"}, 1, []metrics.Label{{Name: "plugin", Value: r.PluginID}})
}
