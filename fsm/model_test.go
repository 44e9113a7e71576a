package fsm

import (
	"slices"
	"sort"

	"github.com/claimd/claimd/structs"
)

// model is a small, deliberately naive reference for the state machine:
// plain maps, no copying discipline, no memdb. The property test applies
// every command to both and demands the same outcome and the same claims,
// allocs and evals. It mirrors the documented rules and their order of
// checks; where the two disagree, one of them is wrong.
type model struct {
	vols   map[string]structs.AccessMode
	nodes  map[string]*mNode
	allocs map[string]*mAlloc
	claims map[string]map[string]*mClaim // volume → alloc → claim
	evals  map[string]*mEval
}

type mNode struct {
	ready, healthy bool
	maxVols        int // max_volumes_per_node of hostdir, 0 = none
	// snmw: hostdir on the node advertises SINGLE_NODE_MULTI_WRITER.
	snmw bool
	// needsController: hostdir on the node says it requires a controller
	// plugin (a claim the node detached itself then waits for one).
	needsController bool
}

type mAlloc struct {
	node     string
	vols     []*structs.AllocVolumeRequest
	stopping bool
	status   structs.AllocClientStatus
}

func (a *mAlloc) terminal() bool { return a.status.Terminal() }

func (a *mAlloc) request(vol string) *structs.AllocVolumeRequest {
	for _, r := range a.vols {
		if r.VolumeID == vol {
			return r
		}
	}
	return nil
}

type mClaim struct {
	node  string
	mode  structs.ClaimMode
	state structs.ClaimState
	taken uint64 // the index of the entry that took it
}

func (c *mClaim) past() bool { return c.state != structs.ClaimStateTaken }

type mEval struct {
	vol     string
	status  structs.EvalStatus
	created uint64
}

func newModel() *model {
	return &model{
		vols: map[string]structs.AccessMode{}, nodes: map[string]*mNode{},
		allocs: map[string]*mAlloc{}, claims: map[string]map[string]*mClaim{}, evals: map[string]*mEval{},
	}
}

// ok is the outcome code of an accepted request.
const okCode structs.ErrorCode = ""

func (m *model) registerVolume(id string, mode structs.AccessMode) structs.ErrorCode {
	if old, exists := m.vols[id]; exists && len(m.claims[id]) > 0 && old != mode {
		return structs.CodeConflict
	}
	m.vols[id] = mode
	return okCode
}

func (m *model) deregisterVolume(id string, force bool) structs.ErrorCode {
	if _, ok := m.vols[id]; !ok {
		return structs.CodeNotFound
	}
	if len(m.claims[id]) > 0 {
		if !force {
			return structs.CodeConflict
		}
		for aid := range m.claims[id] {
			if a := m.allocs[aid]; a != nil && !a.terminal() {
				return structs.CodeConflict
			}
		}
	}
	delete(m.vols, id)
	delete(m.claims, id)
	for eid, e := range m.evals {
		if e.vol == id { // a volume's evals go with it
			delete(m.evals, eid)
		}
	}
	return okCode
}

func (m *model) registerNode(id string, healthy bool, maxVols int, snmw, needsController bool) structs.ErrorCode {
	n := m.nodes[id]
	if n == nil {
		n = &mNode{}
		m.nodes[id] = n
	}
	n.ready, n.healthy, n.maxVols, n.snmw, n.needsController = true, healthy, maxVols, snmw, needsController
	return okCode
}

func (m *model) nodeDown(id string, index uint64) structs.ErrorCode {
	n := m.nodes[id]
	if n == nil {
		return structs.CodeNotFound
	}
	if n.ready {
		n.ready = false
		m.loseAllocs(id, index)
	}
	return okCode
}

func (m *model) deregisterNode(id string, index uint64) structs.ErrorCode {
	if m.nodes[id] == nil {
		return structs.CodeNotFound
	}
	m.loseAllocs(id, index)
	delete(m.nodes, id)
	return okCode
}

func (m *model) loseAllocs(node string, index uint64) {
	for _, aid := range structs.SortedKeys(m.allocs) {
		if a := m.allocs[aid]; a.node == node && !a.terminal() {
			a.status = structs.AllocClientLost
			m.releaseAlloc(aid, index)
		}
	}
}

func (m *model) place(id, node string, vols []*structs.AllocVolumeRequest) structs.ErrorCode {
	if old := m.allocs[id]; old != nil {
		if old.stopping || old.terminal() {
			return structs.CodeConflict // never started again
		}
		if old.node == node && slices.EqualFunc(old.vols, vols, sameVolumeRequest) {
			return okCode
		}
		return structs.CodeConflict
	}
	n := m.nodes[node]
	if n == nil {
		return structs.CodeNotFound
	}
	if !n.ready {
		return structs.CodeUnschedulable
	}
	for _, r := range vols {
		if _, ok := m.vols[r.VolumeID]; !ok {
			return structs.CodeNotFound
		}
	}
	m.allocs[id] = &mAlloc{node: node, vols: vols, status: structs.AllocClientPending}
	return okCode
}

func (m *model) stop(id string) structs.ErrorCode {
	a := m.allocs[id]
	if a == nil {
		return structs.CodeNotFound
	}
	a.stopping = true
	return okCode
}

// clientUpdate: node is the reporting node ("" for none), detached the
// volumes it says it node-detached itself (nil where the entry type does
// not honour them).
func (m *model) clientUpdate(id string, status structs.AllocClientStatus, index uint64, node string, detached []string) structs.ErrorCode {
	a := m.allocs[id]
	if a == nil {
		return structs.CodeNotFound
	}
	if node != "" && a.node != node {
		return structs.CodePermissionDenied
	}
	if a.terminal() {
		return okCode
	}
	a.status = status
	if a.terminal() {
		for _, vol := range detached {
			if c := m.claims[vol][id]; c != nil && !c.past() && c.node == node && a.request(vol) != nil {
				m.nodeDetached(vol, id, index)
			}
		}
		m.releaseAlloc(id, index)
	}
	return okCode
}

// controllerRequired: some registered node (ready or down) says hostdir
// needs a controller plugin.
func (m *model) controllerRequired() bool {
	for _, n := range m.nodes {
		if n.needsController {
			return true
		}
	}
	return false
}

// nodeDetached: the holding node's statement, honoured. The claim is freed
// when no node's plugin needs a controller detach, else it waits at
// node-detached for the controller's. No node left: the plugin is unknown,
// so it waits too.
func (m *model) nodeDetached(vol, aid string, index uint64) {
	if len(m.nodes) == 0 || m.controllerRequired() {
		m.claims[vol][aid].state = structs.ClaimStateNodeDetached
		m.ensureEval(vol, index)
		return
	}
	delete(m.claims[vol], aid)
	if len(m.claims[vol]) == 0 {
		delete(m.claims, vol)
	}
	if m.hasPast(vol) {
		m.ensureEval(vol, index)
		return
	}
	for _, e := range m.evals {
		if e.vol == vol && e.status == structs.EvalStatusPending {
			e.status = structs.EvalStatusComplete
		}
	}
}

// releaseAlloc: every claim of a terminal alloc becomes past, and each
// volume it claimed gets a pending eval.
func (m *model) releaseAlloc(aid string, index uint64) {
	var vols []string
	for _, r := range m.allocs[aid].vols {
		vols = append(vols, r.VolumeID)
	}
	slices.Sort(vols)
	for _, vol := range vols {
		c := m.claims[vol][aid]
		if c == nil {
			continue
		}
		if !c.past() {
			c.state = structs.ClaimStateUnpublishing
		}
		m.ensureEval(vol, index)
	}
}

func (m *model) ensureEval(vol string, index uint64) {
	var done []string
	for id, e := range m.evals {
		if e.vol == vol && e.status == structs.EvalStatusPending {
			return
		}
		if e.vol == vol && e.status.Terminal() {
			done = append(done, id)
		}
	}
	// A volume keeps its newest three finished evals.
	sort.Slice(done, func(i, j int) bool {
		a, b := m.evals[done[i]], m.evals[done[j]]
		if a.created != b.created {
			return a.created > b.created
		}
		return done[i] > done[j]
	})
	for len(done) > 3 {
		delete(m.evals, done[len(done)-1])
		done = done[:len(done)-1]
	}
	m.evals[structs.DeriveEvalID(index, vol)] = &mEval{vol: vol, status: structs.EvalStatusPending, created: index}
}

func (m *model) hasPast(vol string) bool {
	for _, c := range m.claims[vol] {
		if c.past() {
			return true
		}
	}
	return false
}

// claim predicts one claim batch item, in the documented order of checks.
func (m *model) claim(r *structs.VolumeClaimRequest, index uint64) (structs.ErrorCode, bool) {
	mode, ok := m.vols[r.VolumeID]
	if !ok {
		return structs.CodeNotFound, false
	}
	cs := m.claims[r.VolumeID]
	if r.Release {
		if c := cs[r.AllocID]; c != nil && !c.past() {
			if r.NodeDetached && r.ClaimIndex == c.taken && c.node == r.NodeID {
				m.nodeDetached(r.VolumeID, r.AllocID, index)
				return okCode, false
			}
			c.state = structs.ClaimStateUnpublishing
			m.ensureEval(r.VolumeID, index)
		}
		return okCode, false
	}
	a := m.allocs[r.AllocID]
	switch {
	case a == nil:
		return structs.CodeNotFound, false
	case a.node != r.NodeID, a.terminal(), a.stopping, a.request(r.VolumeID) == nil,
		r.Mode == structs.ClaimModeWrite && a.request(r.VolumeID).ReadOnly:
		return structs.CodeInvalid, false
	}
	if c := cs[r.AllocID]; c != nil {
		if c.past() {
			return structs.CodeMaxClaims, false
		}
		if c.mode != r.Mode {
			return structs.CodeConflict, false
		}
		return okCode, false
	}
	if r.Mode == structs.ClaimModeWrite && (mode == structs.AccessModeSingleNodeReader || mode == structs.AccessModeMultiNodeReader) {
		return structs.CodeInvalid, false
	}
	if n := m.nodes[r.NodeID]; n == nil {
		return structs.CodeNotFound, false
	} else if !n.ready || !n.healthy || m.controllerRequired() {
		// No node runs a controller plugin here: a plugin that needs
		// one takes no claim.
		return structs.CodeUnschedulable, false
	} else if mode.NeedsSingleNodeMultiWriter() && !n.snmw {
		return structs.CodeInvalid, false
	}
	otherNode := false
	for _, c := range cs {
		otherNode = otherNode || c.node != r.NodeID
	}
	writers := 0
	for _, c := range cs {
		if c.mode == structs.ClaimModeWrite {
			writers++
		}
	}
	switch {
	case (mode == structs.AccessModeSingleNodeReader || mode == structs.AccessModeSingleNodeWriter ||
		mode == structs.AccessModeSingleNodeSingleWriter) && len(cs) > 0,
		mode == structs.AccessModeSingleNodeMultiWriter && otherNode,
		mode == structs.AccessModeMultiNodeSingleWriter && r.Mode == structs.ClaimModeWrite && writers > 0:
		return structs.CodeMaxClaims, false
	}
	// Node limit: every volume here is hostdir's; a volume counts on a
	// node while any claim from that node, in any state, is not freed.
	if max := m.nodes[r.NodeID].maxVols; max > 0 {
		held, already := 0, false
		for vol, vcs := range m.claims {
			for _, c := range vcs {
				if c.node == r.NodeID {
					held++
					already = already || vol == r.VolumeID
					break
				}
			}
		}
		if !already && held >= max {
			return structs.CodeMaxClaims, false
		}
	}
	if cs == nil {
		cs = map[string]*mClaim{}
		m.claims[r.VolumeID] = cs
	}
	cs[r.AllocID] = &mClaim{node: r.NodeID, mode: r.Mode, state: structs.ClaimStateTaken, taken: index}
	return okCode, true
}

func (m *model) checkpoint(r *structs.ClaimCheckpointRequest, index uint64) structs.ErrorCode {
	if r.NodeDetached && r.State.Rank() < structs.ClaimStateNodeDetached.Rank() {
		return structs.CodeInvalid
	}
	if _, ok := m.vols[r.VolumeID]; !ok {
		return structs.CodeNotFound
	}
	c := m.claims[r.VolumeID][r.AllocID]
	if c == nil {
		return structs.CodeNotFound
	}
	if r.ExpectedState != "" && r.ExpectedState != c.state {
		return structs.CodeConflict
	}
	cur, next := c.state.Rank(), r.State.Rank()
	detached := structs.ClaimStateNodeDetached.Rank()
	switch {
	case next < cur:
		return structs.CodeConflict
	case next == cur:
		return okCode
	case cur < detached && next > detached && !r.ForcedSkip && !r.NodeDetached:
		return structs.CodeConflict
	case c.state == structs.ClaimStateTaken && r.State != structs.ClaimStateUnpublishing && !r.ForcedSkip:
		return structs.CodeConflict
	}
	wasLive := !c.past()
	if r.State == structs.ClaimStateFreed {
		delete(m.claims[r.VolumeID], r.AllocID)
		if len(m.claims[r.VolumeID]) == 0 {
			delete(m.claims, r.VolumeID)
		}
		// The last past claim freed ends the volume's pending evals.
		if !m.hasPast(r.VolumeID) {
			for _, e := range m.evals {
				if e.vol == r.VolumeID && e.status == structs.EvalStatusPending {
					e.status = structs.EvalStatusComplete
				}
			}
		}
		return okCode
	}
	c.state = r.State
	if wasLive {
		m.ensureEval(r.VolumeID, index)
	}
	return okCode
}

func (m *model) upsertEval(id, vol string, index uint64) structs.ErrorCode {
	if m.evals[id] != nil {
		return structs.CodeConflict // the test only re-upserts finished evals
	}
	if _, ok := m.vols[vol]; !ok {
		return okCode // an eval lives in its volume: none is kept for a missing one
	}
	e := &mEval{vol: vol, status: structs.EvalStatusPending, created: index}
	if !m.hasPast(vol) {
		e.status = structs.EvalStatusComplete
	}
	m.evals[id] = e
	return okCode
}

func (m *model) completeEval(id string, status structs.EvalStatus) structs.ErrorCode {
	e := m.evals[id]
	if e == nil {
		return structs.CodeNotFound
	}
	if e.status.Terminal() {
		if e.status == status {
			return okCode
		}
		return structs.CodeConflict
	}
	if status == structs.EvalStatusComplete {
		if _, ok := m.vols[e.vol]; ok && m.hasPast(e.vol) {
			return structs.CodeConflict
		}
	}
	e.status = status
	return okCode
}
