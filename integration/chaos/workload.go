package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// PluginID is the CSI plugin every backend runs (hostdir, with volumes
// created on first use) on the workers and the controller node.
const PluginID = "hostdir"

// Parking: every allocation of the linearizability workload also asks for
// the parking volume, first. The parking volume belongs to a plugin no
// node runs, so a client agent, which claims an allocation's volumes in
// order, is refused it (unschedulable, which it retries with backoff) for
// as long as the allocation lives, and never claims the workload's volume
// itself. That leaves the workload the only caller that claims and
// releases those volumes, so every change to their claims is an operation
// in the history (see doc.go for the alternatives and why they fail).
const (
	parkingVolume = "chaos-park"
	parkingPlugin = "chaos-parking"
)

// Timeouts of one workload call: long enough to ride out an election
// (the server holds a call 5 s for a leader), short enough that a caller
// cut off from the leader moves on under a new identity.
const (
	opTimeout        = 6 * time.Second
	terminalWait     = 10 * time.Second
	stopAttempts     = 3
	maxOpsPerCaller  = 100000
	mountRunningWait = 15 * time.Second
)

type volSpec struct {
	ID     string
	Access structs.AccessMode
}

// workload drives the callers and the mount runners.
type workload struct {
	c       Cluster
	h       *History
	lin     []volSpec
	mounts  []volSpec
	workers []Worker
	// extNode is each worker's node ID as the plugin knows it.
	extNode map[string]string

	stopping atomic.Bool
	wg       sync.WaitGroup

	mountStats mountStats
}

// start launches the callers (each with its own client, bound to one
// server, round robin) and the mount runners, all with the workload's
// credentials (Cluster.WorkloadClient).
func (w *workload) start(seed int64, callers, mountRunners int) []*api.Client {
	servers := w.c.Servers()
	var clients []*api.Client
	for i := 0; i < callers; i++ {
		cl := w.c.WorkloadClient(servers[i%len(servers)])
		clients = append(clients, cl)
		c := &caller{w: w, id: i, api: cl, rng: rand.New(rand.NewPCG(uint64(seed), uint64(i)))}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			c.run()
		}()
	}
	for i := 0; i < mountRunners; i++ {
		cl := w.c.WorkloadClient(servers[(i+1)%len(servers)])
		clients = append(clients, cl)
		m := &mountRunner{w: w, id: i, api: cl, rng: rand.New(rand.NewPCG(uint64(seed), uint64(1000+i)))}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			m.run()
		}()
	}
	return clients
}

// stop asks every caller to finish its current identity and waits, at most
// timeout.
func (w *workload) stop(timeout time.Duration) error {
	w.stopping.Store(true)
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("workload callers did not finish within %s of being stopped", timeout)
	}
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// definite reports an error after which the request was certainly not
// applied: a refusal by the state machine or the endpoint, a missing
// leader (the forwarder answers no_leader only for what it did not send),
// or a request that never left this process.
func definite(err error) bool {
	if errors.Is(err, rpc.ErrNotSent) {
		return true
	}
	for _, e := range []error{structs.ErrMaxClaims, structs.ErrInvalid, structs.ErrNotFound, structs.ErrConflict,
		structs.ErrUnschedulable, structs.ErrPermissionDenied, structs.ErrTooLarge, structs.ErrNoLeader} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// classifyClaim: a claim whose controller publish failed was applied and
// then released by the server, and one whose publish context could not be
// recorded is live: both are unknown to the caller, whatever their code.
func classifyClaim(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case strings.Contains(err.Error(), "controller publish") || strings.Contains(err.Error(), "publish context"):
		return Unknown
	case definite(err):
		return Refused
	}
	return Unknown
}

func classify(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case definite(err):
		return Refused
	}
	return Unknown
}

func liveOf(v *structs.Volume) []LiveClaim {
	var out []LiveClaim
	for id := range v.WriteClaims {
		out = append(out, LiveClaim{Alloc: id, Write: true})
	}
	for id := range v.ReadClaims {
		out = append(out, LiveClaim{Alloc: id})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Alloc < out[j].Alloc })
	return out
}

// caller is one client of the linearizability workload.
type caller struct {
	w   *workload
	id  int
	api *api.Client
	rng *rand.Rand
	seq int
}

// identity is one allocation a caller claims with. After an unknown
// result the caller ends it and continues with a new one.
type identity struct {
	alloc, worker string
	nodeID        string
	vol           volSpec
	write         bool
	// pending are unknown claims and releases whose effect may still land:
	// a claim until the stop commits, a release until the alloc is seen
	// terminal.
	pendingClaims   []*Op
	pendingReleases []*Op
	// notPlaced: the placement was refused, there is nothing to stop.
	notPlaced bool
}

func (c *caller) run() {
	for n := 0; n < maxOpsPerCaller && !c.w.stopping.Load(); n++ {
		if c.rng.IntN(3) == 0 {
			c.read(c.pickVol())
		}
		c.life()
	}
}

func (c *caller) pickVol() volSpec { return c.w.lin[c.rng.IntN(len(c.w.lin))] }

// chooseWrite picks a claim mode; now and then a write on a read-only
// volume, which must be refused as invalid.
func chooseWrite(rng *rand.Rand, m structs.AccessMode) bool {
	switch m {
	case structs.AccessModeSingleNodeReader, structs.AccessModeMultiNodeReader:
		return rng.IntN(10) == 0
	case structs.AccessModeSingleNodeWriter, structs.AccessModeSingleNodeSingleWriter:
		return rng.IntN(10) < 7
	case structs.AccessModeMultiNodeSingleWriter:
		return rng.IntN(10) < 4
	}
	return rng.IntN(2) == 0
}

func (c *caller) think() {
	time.Sleep(time.Duration(c.rng.IntN(5)) * time.Millisecond)
}

func (c *caller) read(vol volSpec) {
	h := c.w.h
	op := h.Begin(&Op{Caller: c.id, Kind: OpRead, Volume: vol.ID, Access: vol.Access})
	ctx, cancel := opCtx()
	defer cancel()
	v, _, err := c.api.Volume(ctx, vol.ID, structs.QueryOptions{})
	if err != nil || v == nil {
		if err == nil {
			err = errors.New("no volume in the reply")
		}
		h.End(op, Unknown, err)
		return
	}
	h.End(op, OK, nil, func(o *Op) { o.Live = liveOf(v) })
}

// life runs one identity: claim, then (if it holds) reads, an idempotent
// re-claim now and then, and a release by RPC or by stopping the alloc.
func (c *caller) life() {
	c.seq++
	wk := c.w.workers[c.rng.IntN(len(c.w.workers))]
	vol := c.pickVol()
	id := &identity{
		alloc: fmt.Sprintf("c%02d-%05d", c.id, c.seq), worker: wk.Name, nodeID: wk.NodeID,
		vol: vol, write: chooseWrite(c.rng, vol.Access),
	}
	if !c.claim(id, true) {
		if !id.notPlaced {
			c.stop(id)
		}
		// Refused or cut off: do not spin against a server that is down.
		time.Sleep(time.Duration(20+c.rng.IntN(180)) * time.Millisecond)
		return
	}
	for k := c.rng.IntN(4); k > 0 && !c.w.stopping.Load(); k-- {
		c.think()
		switch r := c.rng.IntN(10); {
		case r < 6:
			c.read(id.vol)
		case r < 9:
			c.read(c.pickVol())
		default:
			if !c.claim(id, false) { // repeated claim: must return the same claim
				c.stop(id)
				return
			}
		}
	}
	c.think()
	if c.rng.IntN(2) == 0 {
		if c.release(id) && c.rng.IntN(3) == 0 {
			// Claim again right after the release: refused while the
			// past claim is being freed, a new claim once it is.
			c.claim(id, false)
		}
	}
	c.stop(id)
}

// claim places the allocation first when place is set. It reports whether
// the identity now certainly holds its claim.
func (c *caller) claim(id *identity, place bool) bool {
	h := c.w.h
	op := h.Begin(&Op{Caller: c.id, Kind: OpClaim, Volume: id.vol.ID, Access: id.vol.Access,
		Alloc: id.alloc, Worker: id.worker, Write: id.write, Again: !place})
	if place {
		a := &structs.Alloc{ID: id.alloc, NodeID: id.nodeID, Volumes: []*structs.AllocVolumeRequest{
			{VolumeID: parkingVolume, ReadOnly: true},
			{VolumeID: id.vol.ID, ReadOnly: !id.write},
		}}
		ctx, cancel := opCtx()
		_, err := c.api.PlaceAllocs(ctx, a)
		cancel()
		if err != nil {
			// No Claim was sent, and no agent claims for a parked
			// allocation: nothing can have been claimed.
			h.End(op, Refused, err, func(o *Op) { o.Err = "place: " + err.Error() })
			id.notPlaced = definite(err)
			return false
		}
	}
	mode := structs.ClaimModeRead
	if id.write {
		mode = structs.ClaimModeWrite
	}
	ctx, cancel := opCtx()
	resp, err := c.api.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: id.vol.ID, AllocID: id.alloc, NodeID: id.nodeID, Mode: mode})
	cancel()
	out := classifyClaim(err)
	h.End(op, out, err, func(o *Op) {
		if err == nil && resp != nil {
			o.New = resp.New
		}
	})
	if out == Unknown {
		id.pendingClaims = append(id.pendingClaims, op)
		// The server may have taken the claim and released it again (a
		// failed controller publish): a release that may land any time
		// from the call until the alloc is seen terminal.
		rel := &Op{Kind: OpRelease, Volume: id.vol.ID, Access: id.vol.Access, Alloc: id.alloc, Worker: id.worker,
			Call: op.Call, Return: Inf, Outcome: Unknown, Code: "maybe-released-by-server", Nemesis: op.Nemesis}
		h.Add(rel)
		id.pendingReleases = append(id.pendingReleases, rel)
	}
	return out == OK
}

func (c *caller) release(id *identity) bool {
	h := c.w.h
	op := h.Begin(&Op{Caller: c.id, Kind: OpRelease, Volume: id.vol.ID, Access: id.vol.Access, Alloc: id.alloc, Worker: id.worker})
	ctx, cancel := opCtx()
	_, err := c.api.Release(ctx, id.vol.ID, id.alloc)
	cancel()
	out := classify(err)
	h.End(op, out, err)
	if out == Unknown {
		id.pendingReleases = append(id.pendingReleases, op)
	}
	return out == OK
}

// stop ends the identity: Alloc.Stop (retried, it is idempotent), then
// wait until the agent has reported the alloc terminal, which releases
// its claims. Once the stop has committed no claim of the alloc can be
// taken any more; once it is terminal every release has landed.
func (c *caller) stop(id *identity) {
	h := c.w.h
	op := h.Begin(&Op{Caller: c.id, Kind: OpStop, Volume: id.vol.ID, Access: id.vol.Access, Alloc: id.alloc, Worker: id.worker})
	var err error
	acked := false
	for attempt := 0; attempt < stopAttempts; attempt++ {
		ctx, cancel := opCtx()
		_, err = c.api.StopAllocs(ctx, id.alloc)
		cancel()
		if err == nil {
			acked = true
			break
		}
		if errors.Is(err, structs.ErrNotFound) {
			// Never placed (or not yet: a placement still held by a
			// server lands parked, and only the workload claims).
			now := h.Now()
			for _, p := range id.pendingClaims {
				h.Extend(p, now)
			}
			h.End(op, Refused, err)
			return
		}
		if definite(err) && !errors.Is(err, structs.ErrNoLeader) && !errors.Is(err, rpc.ErrNotSent) {
			break
		}
	}
	if !acked {
		h.End(op, Unknown, err)
		return
	}
	now := h.Now()
	for _, p := range id.pendingClaims {
		h.Extend(p, now)
	}
	deadline := time.Now().Add(terminalWait)
	for time.Now().Before(deadline) {
		ctx, cancel := opCtx()
		a, _, gerr := c.api.Alloc(ctx, id.alloc, structs.QueryOptions{})
		cancel()
		if gerr == nil && a != nil && a.Terminal() {
			h.End(op, OK, nil)
			now := h.Now()
			for _, p := range id.pendingReleases {
				h.Extend(p, now)
			}
			return
		}
		if gerr != nil {
			err = gerr
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err == nil {
		err = fmt.Errorf("alloc %s not terminal within %s of its stop", id.alloc, terminalWait)
	}
	h.End(op, Unknown, err)
}

// mountStats counts what the mount runners saw.
type mountStats struct {
	mu                                   sync.Mutex
	Placed, Running, Failed, NotRunning  int
	Stopped, StopUnconfirmed, PlaceError int
	FailReasons                          map[string]int
}

func (s *mountStats) add(f func(*mountStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.FailReasons == nil {
		s.FailReasons = map[string]int{}
	}
	f(s)
}

func (s *mountStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := fmt.Sprintf("placed %d, running %d, failed %d, not running in %s %d, stopped %d, stop unconfirmed %d, place errors %d",
		s.Placed, s.Running, s.Failed, mountRunningWait, s.NotRunning, s.Stopped, s.StopUnconfirmed, s.PlaceError)
	reasons := make([]string, 0, len(s.FailReasons))
	for r, n := range s.FailReasons {
		reasons = append(reasons, fmt.Sprintf("%dx %s", n, r))
	}
	sort.Strings(reasons)
	if len(reasons) > 0 {
		out += "; failures: " + strings.Join(reasons, "; ")
	}
	return out
}

// mountRunner places allocations the client agents run for real (claim,
// NodeStage, NodePublish) on a separate pool of volumes, and stops them,
// so that the plugins' audit logs see real mounts and server-driven
// unmounts under the faults. Their claims are made by the agents at times
// the workload cannot see, so they are not in the linearizability history;
// the audit, release and state checks cover them.
type mountRunner struct {
	w   *workload
	id  int
	api *api.Client
	rng *rand.Rand
}

func (m *mountRunner) run() {
	for n := 0; n < maxOpsPerCaller && !m.w.stopping.Load(); n++ {
		m.once(n)
	}
}

func (m *mountRunner) once(n int) {
	w := m.w
	vol := w.mounts[m.rng.IntN(len(w.mounts))]
	wk := w.workers[m.rng.IntN(len(w.workers))]
	ro := !chooseWrite(m.rng, vol.Access)
	if vol.Access == structs.AccessModeSingleNodeReader || vol.Access == structs.AccessModeMultiNodeReader {
		ro = true
	}
	id := fmt.Sprintf("m%d-%05d", m.id, n)
	ctx, cancel := opCtx()
	_, err := m.api.PlaceAllocs(ctx, &structs.Alloc{ID: id, NodeID: wk.NodeID,
		Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol.ID, ReadOnly: ro}}})
	cancel()
	if err != nil {
		w.mountStats.add(func(s *mountStats) { s.PlaceError++ })
		time.Sleep(time.Duration(100+m.rng.IntN(200)) * time.Millisecond)
		if definite(err) {
			return
		}
	} else {
		w.mountStats.add(func(s *mountStats) { s.Placed++ })
		status, desc := m.waitStatus(id, mountRunningWait, func(a *structs.Alloc) bool {
			return a.ClientStatus == structs.AllocClientRunning || a.Terminal()
		})
		switch status {
		case structs.AllocClientRunning:
			w.mountStats.add(func(s *mountStats) { s.Running++ })
		case structs.AllocClientFailed, structs.AllocClientLost:
			w.mountStats.add(func(s *mountStats) { s.Failed++; s.FailReasons[string(status)+": "+firstLine(desc)]++ })
		default:
			w.mountStats.add(func(s *mountStats) { s.NotRunning++ })
		}
		if !w.stopping.Load() {
			time.Sleep(time.Duration(100+m.rng.IntN(500)) * time.Millisecond)
		}
	}
	for attempt := 0; attempt < stopAttempts; attempt++ {
		ctx, cancel := opCtx()
		_, err = m.api.StopAllocs(ctx, id)
		cancel()
		if err == nil || errors.Is(err, structs.ErrNotFound) {
			break
		}
	}
	if err != nil {
		w.mountStats.add(func(s *mountStats) { s.StopUnconfirmed++ })
		return
	}
	if st, _ := m.waitStatus(id, terminalWait, (*structs.Alloc).Terminal); st.Terminal() {
		w.mountStats.add(func(s *mountStats) { s.Stopped++ })
	} else {
		w.mountStats.add(func(s *mountStats) { s.StopUnconfirmed++ })
	}
}

// waitStatus polls the alloc until done says so or the time is up, and
// returns the last status seen.
func (m *mountRunner) waitStatus(id string, d time.Duration, done func(*structs.Alloc) bool) (structs.AllocClientStatus, string) {
	var status structs.AllocClientStatus
	var desc string
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := opCtx()
		a, _, err := m.api.Alloc(ctx, id, structs.QueryOptions{})
		cancel()
		if err == nil && a != nil {
			status, desc = a.ClientStatus, a.ClientDescription
			if done(a) {
				return status, desc
			}
		}
		if m.w.stopping.Load() && status != structs.AllocClientPending {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return status, desc
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
