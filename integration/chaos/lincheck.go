package chaos

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/claimd/claimd/structs"
)

// linResult is the verdict of the linearizability check.
type linResult struct {
	// Err is the problem: nil when every volume is linearizable.
	Err error
	// Visualise is what the visualisation shows: the volumes (or parts)
	// that failed when one did, else every volume checked whole.
	Visualise []porcupine.Operation
	// ByParts names the volumes whose whole history the checker could not
	// finish within its share of the timeout, and that were then checked
	// allocation by allocation (see checkByParts).
	ByParts []string
}

// checkLinearizable runs porcupine over the claim/release/read history,
// volume by volume, several at once. A volume whose whole history does not
// finish within half the timeout is checked by parts in the other half.
// The search is exponential in the number of operations in flight at once
// (a partition leaves dozens of calls pending for seconds), and on volumes
// where many claims coexist it can take minutes and tens of gigabytes.
func checkLinearizable(ops []Op, callers int, timeout time.Duration) linResult {
	pops := porcupineOps(ops, callers)
	vols := claimModel.Partition(pops)
	verdicts := make([]volumeVerdict, len(vols))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, part := range vols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			verdicts[i] = checkVolume(part, timeout)
		}()
	}
	wg.Wait()

	var res linResult
	var failing, whole []porcupine.Operation
	var failed, unknown []string
	for _, v := range verdicts {
		if v.byParts {
			res.ByParts = append(res.ByParts, v.volume)
		}
		switch v.result {
		case porcupine.Illegal:
			failed = append(failed, v.volume)
			failing = append(failing, v.shown...)
		case porcupine.Unknown:
			unknown = append(unknown, v.volume)
		default:
			if !v.byParts {
				whole = append(whole, v.shown...)
			}
		}
	}
	switch {
	case len(failed) > 0:
		res.Visualise = failing
		res.Err = fmt.Errorf("linearizability: the claim/release/read history of %s is not linearizable "+
			"(the visualisation shows the longest linearizable prefix of each):\n%s",
			strings.Join(failed, ", "), explainIllegal(failing, timeout))
	case len(unknown) > 0:
		res.Err = fmt.Errorf("linearizability: the checker did not finish within %s on %s (inconclusive; "+
			"shorten the run or raise -chaos.check-timeout)", timeout, strings.Join(unknown, ", "))
	default:
		res.Visualise = whole
	}
	return res
}

type volumeVerdict struct {
	volume  string
	result  porcupine.CheckResult
	byParts bool
	// shown is what the visualisation gets of this volume: the failing
	// part when a part failed, else the volume's operations.
	shown []porcupine.Operation
}

// checkVolume checks one volume whole, or by parts when the whole check
// does not finish in half the timeout.
func checkVolume(ops []porcupine.Operation, timeout time.Duration) volumeVerdict {
	v := volumeVerdict{volume: ops[0].Input.(*Op).Volume, shown: ops}
	v.result = porcupine.CheckOperationsTimeout(claimModel, ops, timeout/2)
	if v.result != porcupine.Unknown {
		return v
	}
	parts := splitByAllocation(ops)
	if parts == nil {
		return v
	}
	v.byParts = true
	deadline := time.Now().Add(timeout / 2)
	for _, part := range parts {
		left := time.Until(deadline)
		if left <= 0 {
			v.result = porcupine.Unknown
			return v
		}
		v.result = porcupine.CheckOperationsTimeout(claimModel, part, left)
		if v.result != porcupine.Ok {
			if v.result == porcupine.Illegal {
				v.shown = part
			}
			return v
		}
	}
	return v
}

// splitByAllocation splits a volume's history into histories that can be
// checked one at a time, or returns nil when its access mode makes every
// claim depend on every other (single-node modes, whose state is at most
// one claim and never needs this).
//
// Where claims of different allocations do not constrain each other, the
// volume is a set of independent registers (alloc held or not) read all at
// once: readers on a multi-node volume, every claim on a multi-node
// multi-writer one. The writers of a multi-node single-writer volume
// constrain each other and stay together in one part. Each part keeps the
// operations of its allocations and every read, with the read's answer cut
// down to those allocations; an allocation no operation names but a read
// shows is a part of its own (where the read fails).
//
// The split is sound: any linearization of the whole history, cut down to
// a part, is a linearization of the part, so a part that fails is a real
// violation. It is weaker than the whole check only for reads that are
// right allocation by allocation but could not all have happened at one
// moment: a read that mixes two moments.
func splitByAllocation(ops []porcupine.Operation) [][]porcupine.Operation {
	access := ops[0].Input.(*Op).Access
	switch access {
	case structs.AccessModeMultiNodeReader, structs.AccessModeMultiNodeMultiWriter, structs.AccessModeMultiNodeSingleWriter:
	default:
		return nil
	}
	const writers = "\x00writers"
	group := map[string]string{}
	var reads []porcupine.Operation
	for _, o := range ops {
		op := o.Input.(*Op)
		switch {
		case op.Kind == OpRead:
			reads = append(reads, o)
			for _, c := range op.Live {
				if group[c.Alloc] == "" {
					group[c.Alloc] = c.Alloc
				}
			}
		case op.Kind == OpClaim && op.Write && access == structs.AccessModeMultiNodeSingleWriter:
			group[op.Alloc] = writers
		case group[op.Alloc] == "":
			group[op.Alloc] = op.Alloc
		}
	}
	byGroup := map[string][]porcupine.Operation{}
	for _, o := range ops {
		if op := o.Input.(*Op); op.Kind != OpRead {
			byGroup[group[op.Alloc]] = append(byGroup[group[op.Alloc]], o)
		}
	}
	for g := range group {
		if _, ok := byGroup[group[g]]; !ok {
			byGroup[group[g]] = nil
		}
	}
	names := make([]string, 0, len(byGroup))
	for g := range byGroup {
		names = append(names, g)
	}
	sort.Strings(names)
	parts := make([][]porcupine.Operation, 0, len(names))
	for _, g := range names {
		part := append([]porcupine.Operation(nil), byGroup[g]...)
		for _, r := range reads {
			read := *r.Input.(*Op)
			read.Live = nil
			for _, c := range r.Input.(*Op).Live {
				if group[c.Alloc] == g {
					read.Live = append(read.Live, c)
				}
			}
			r.Input, r.Output = &read, &read
			part = append(part, r)
		}
		parts = append(parts, part)
	}
	return parts
}
