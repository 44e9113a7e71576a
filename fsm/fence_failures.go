package fsm

import (
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

// Fence failures (issue 39): a node's report that its fence of a claim
// failed is recorded on the volume (structs.FenceFailure), from the
// report its registration carried (the leader writes a FenceReport entry
// right after the registration), so that the volume shows it until the
// node reports that claim's fence done or is deregistered. Everything
// here is decided by the log entry alone (the report's own times, the
// entry's index, the report's order), never by the clock or map order.
// The entry is advisory (an older server skips it), so nothing else the
// state machine decides may depend on a volume's fence failures.

func init() {
	registerCommand(structs.FenceReportRequestType, applyFenceReport)
}

// applyFenceReport records a registered node's fence report on the
// volumes it names.
func applyFenceReport(tx *txn, req *structs.FenceReportRequest) (any, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if getNode(tx, req.NodeID) == nil {
		return nil, structs.NotFound("node", req.NodeID)
	}
	recordFenceReport(tx, req.NodeID, req.Report)
	return nil, nil
}

// indexFenceFailed holds only the volumes with a fence failure, so the
// gauge, the leader's alarm and a node's deregistration find them without
// scanning every volume.
const indexFenceFailed = "fence_failed"

type fenceFailedIndexer struct{}

func (fenceFailedIndexer) FromObject(raw any) (bool, []byte, error) {
	v, ok := raw.(*structs.Volume)
	if !ok {
		return false, nil, fmt.Errorf("fence_failed index: %T is not a volume", raw)
	}
	if len(v.FenceFailures) == 0 {
		return false, nil, nil
	}
	return true, nulTerminated(v.ID), nil
}

// FromArgs: no argument lists every volume in the index (memdb seeks the
// key as a prefix); one is a volume ID.
func (fenceFailedIndexer) FromArgs(args ...any) ([]byte, error) {
	switch len(args) {
	case 0:
		return []byte{}, nil
	case 1:
		s, ok := args[0].(string)
		if !ok {
			return nil, fmt.Errorf("fence_failed index: argument %T is not a string", args[0])
		}
		return nulTerminated(s), nil
	}
	return nil, fmt.Errorf("fence_failed index: want at most 1 argument, got %d", len(args))
}

func fenceFailedSchema() *memdb.IndexSchema {
	return &memdb.IndexSchema{Name: indexFenceFailed, AllowMissing: true, Indexer: fenceFailedIndexer{}}
}

// VolumesWithFenceFailures returns the volumes a node reported a failed
// fence of, sorted by ID.
func (s *StateStore) VolumesWithFenceFailures(ws memdb.WatchSet) ([]*structs.Volume, error) {
	return listAs[structs.Volume](s.list(ws, TableVolumes, indexFenceFailed))
}

// recordFenceReport applies the fence report a node's registration
// carried: a failed fence of a claim is recorded on its volume (replacing
// that node's earlier word on the same claim), a fence that went through
// clears it. Volumes that are gone are skipped: nothing is left to warn
// on.
func recordFenceReport(tx *txn, nodeID string, r *structs.FenceReport) {
	if r == nil {
		return
	}
	// Each volume once, in ID order, with every report line about it in
	// the report's order: one copy per volume, however many lines.
	byVol := map[string][]*structs.FencedVolume{}
	var ids []string
	for _, fv := range r.Volumes {
		if fv == nil || !reportsOwnClaim(tx, nodeID, fv) {
			continue
		}
		if _, ok := byVol[fv.VolumeID]; !ok {
			ids = append(ids, fv.VolumeID)
		}
		byVol[fv.VolumeID] = append(byVol[fv.VolumeID], fv)
	}
	slices.Sort(ids)
	for _, id := range ids {
		old := getVolume(tx, id)
		if old == nil {
			continue
		}
		fs := slices.Clone(old.FenceFailures)
		for _, fv := range byVol[id] {
			fs = mergeFenceFailure(fs, nodeID, r, fv, tx.index)
		}
		if sameFailures(fs, old.FenceFailures) {
			continue // a report sent again: nothing new, no write
		}
		v := cowVolume(old, tx.index)
		v.FenceFailures = boundFailures(fs)
		tx.put(TableVolumes, v)
	}
}

// reportsOwnClaim: a node speaks only of its own allocations. A line
// naming an allocation the state knows on another node, or one that never
// asked for the volume, is skipped (it can neither raise nor clear another
// node's word); an allocation no longer known (collected) is taken on the
// node's word, so that a late report still counts.
func reportsOwnClaim(tx *txn, nodeID string, fv *structs.FencedVolume) bool {
	a := getAlloc(tx, fv.AllocID)
	if a == nil {
		return true
	}
	if a.NodeID != nodeID {
		return false
	}
	for _, r := range a.Volumes {
		if r.VolumeID == fv.VolumeID {
			return true
		}
	}
	return false
}

// mergeFenceFailure replaces the node's entry for fv's claim with fv's
// word: a failure, or nothing once the fence went through.
func mergeFenceFailure(fs []*structs.FenceFailure, nodeID string, r *structs.FenceReport, fv *structs.FencedVolume, index uint64) []*structs.FenceFailure {
	var prev *structs.FenceFailure
	fs = slices.DeleteFunc(fs, func(f *structs.FenceFailure) bool {
		if f.NodeID == nodeID && f.AllocID == fv.AllocID {
			prev = f
			return true
		}
		return false
	})
	if !fv.Failed() {
		return fs
	}
	f := &structs.FenceFailure{NodeID: nodeID, AllocID: fv.AllocID, HookOK: fv.HookOK, Unmounted: fv.Unmounted,
		Error: fv.Error, FencedAt: r.At, Done: fv.Done, ReportIndex: index}
	if prev != nil && prev.SameReport(f) {
		f = prev // the same word again keeps the index it was first heard at
	}
	fs = append(fs, f)
	structs.SortFenceFailures(fs)
	return fs
}

func sameFailures(a, b []*structs.FenceFailure) bool {
	return slices.EqualFunc(a, b, func(x, y *structs.FenceFailure) bool { return x == y })
}

// boundFailures keeps the MaxFenceFailures most recently reported,
// sorted by node then alloc; nil when there are none.
func boundFailures(fs []*structs.FenceFailure) []*structs.FenceFailure {
	if len(fs) == 0 {
		return nil
	}
	if n := len(fs) - structs.MaxFenceFailures; n > 0 {
		slices.SortStableFunc(fs, func(a, b *structs.FenceFailure) int {
			switch {
			case a.ReportIndex < b.ReportIndex:
				return -1
			case a.ReportIndex > b.ReportIndex:
				return 1
			}
			return 0
		})
		fs = fs[n:]
		structs.SortFenceFailures(fs)
	}
	return fs
}

// clearNodeFenceFailures drops a deregistered node's failures from every
// volume: an operator took the node out of the cluster, and with it its
// claims on those volumes.
func clearNodeFenceFailures(tx *txn, nodeID string) {
	for _, raw := range tx.all(TableVolumes, indexFenceFailed) {
		old := raw.(*structs.Volume)
		fs := slices.DeleteFunc(slices.Clone(old.FenceFailures), func(f *structs.FenceFailure) bool { return f.NodeID == nodeID })
		if len(fs) == len(old.FenceFailures) {
			continue
		}
		v := cowVolume(old, tx.index)
		v.FenceFailures = boundFailures(fs)
		tx.put(TableVolumes, v)
	}
}
