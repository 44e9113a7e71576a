package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/structs"
)

// Self-fencing (decision 39). When the node lease is about to run out
// without renewal, the agent stops what writes through the volumes whose
// policy is fence (the operator's fence command), unmounts them locally
// (NodeUnpublish, NodeUnstage) and writes down what it did, all before the
// lease runs out. The servers, counting from the last heartbeat they
// received with a margin for clock drift, skip the node detach of those
// claims only after that. A fenced node does not mount again on its own:
// once it reaches the servers it reports the fence, and allocations that
// are still running there are reported failed.
//
// Stopping a writer (issue 39) is the fence command, then the unmount, and
// it is done only when both succeeded: until then the claim stays pending
// and both are tried again (fence_loop.go), with an ERROR that says the
// volume may still be written on this node, and the report goes to the
// servers at the next registration the agent can make. The same stop
// undoes a claim the servers no longer hold for this node, whatever its
// policy (fence_check.go): an operator's `volume detach -force` while the
// node was away, or a fence release. The servers decided; the node
// complies.

// fenceRecordFile keeps the last fence report in the data dir until the
// servers acknowledged it.
const fenceRecordFile = "fence.json"

// fenceRecord is the durable form of the last fence.
type fenceRecord struct {
	Report *structs.FenceReport `json:"report"`
	// Reported: a registration carrying the report was acknowledged.
	Reported bool `json:"reported"`
	// Allocs are the allocations fenced, reported failed once the servers
	// are back if they still run there.
	Allocs []string `json:"allocs,omitempty"`
}

// fencer runs the fence loop and guards mounts against it.
type fencer struct {
	a       *Agent
	lease   *nodeLease
	held    *heldClaims
	command string
	// timeout bounds one run of the command (-fence-timeout).
	timeout time.Duration
	path    string
	// startupDone is closed once the start-up fence is over: the node
	// registers, and allocations run, only after it.
	startupDone chan struct{}
	startup     startupLease
	// wake: new claims to stop (fence_check.go found some).
	wake chan struct{}
	// check asks the check loop to compare what is held here with what
	// the servers hold (fence_check.go).
	check chan struct{}

	mu sync.Mutex
	// generation counts fences: a mount that began under one generation
	// and finished under another is undone (fenced while it ran).
	generation uint64
	record     *fenceRecord
	// failedReported: fenced allocations already reported failed.
	failedReported map[string]bool
	// checkAfterRenewal: after a fence, held claims are checked with the
	// servers at the next renewal (their release may have skipped the
	// node detach).
	checkAfterRenewal bool
	// pending are the claims whose writer must be stopped, by key: until
	// the fence command and the unmount both succeeded.
	pending map[string]*pendingStop
	// seq counts changes to the record, so that an acknowledged
	// registration marks reported only the version it carried.
	seq uint64
	// fenceSince is when the lease last ran out (zero while live).
	fenceSince time.Time
	// noVolumeRead: the servers refused Volume.Get to this node's secret
	// (ACLs): the check goes by the allocation alone from then on, said
	// once (warnNoVolumeRead).
	noVolumeRead     atomic.Bool
	warnNoVolumeRead sync.Once
}

// pendingStop is one claim whose writer must be stopped.
type pendingStop struct {
	claim *heldClaim
	// reason says why (the lease, or what the servers say).
	reason string
	// next is when to try again (zero: at once).
	next     time.Time
	attempts int
}

func newFencer(a *Agent, lease *nodeLease, held *heldClaims, command string, timeout time.Duration) (*fencer, error) {
	f := &fencer{a: a, lease: lease, held: held, command: command, timeout: timeout,
		path: filepath.Join(a.cfg.DataDir, fenceRecordFile), failedReported: map[string]bool{},
		startupDone: make(chan struct{}), wake: make(chan struct{}, 1), check: make(chan struct{}, 1),
		pending: map[string]*pendingStop{}}
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		var rec fenceRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("read %s: %w", f.path, err)
		}
		f.record = &rec
	}
	return f, nil
}

// mountAllowed is checked before a volume under the fence policy is
// mounted: only while the lease has more left than the fence needs.
// It returns the fence generation to pass to mountStillValid.
func (f *fencer) mountAllowed(policy structs.NodeLostPolicy) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if policy == structs.NodeLostFence && f.lease.enabled() && f.lease.remaining() <= f.lease.fenceBudget() {
		return 0, structs.NewError(structs.CodeUnavailable, "this node's lease is not renewed: volumes under the fence policy are not mounted until it is")
	}
	return f.generation, nil
}

// mountStillValid reports whether no fence ran since mountAllowed.
func (f *fencer) mountStillValid(gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.generation == gen
}

// pendingReport is the fence report to send with the next registration,
// with the version it is (for reported).
func (f *fencer) pendingReport() (*structs.FenceReport, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record == nil || f.record.Reported {
		return nil, 0
	}
	return f.record.Report.Copy(), f.seq
}

// reported marks the report sent with an acknowledged registration, if
// it has not changed since (a later change goes with the next one).
func (f *fencer) reported(r *structs.FenceReport, seq uint64) {
	if r == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record == nil || f.record.Report == nil || f.seq != seq {
		return
	}
	f.record.Reported = true
	f.saveLocked()
}

// fencedAlloc reports whether the allocation was fenced by the last fence.
func (f *fencer) fencedAlloc(allocID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record == nil {
		return false
	}
	for _, id := range f.record.Allocs {
		if id == allocID {
			return true
		}
	}
	return false
}

func (f *fencer) saveLocked() {
	b, err := json.Marshal(f.record)
	if err == nil {
		err = writeFileDurable(f.path, b)
	}
	if err != nil {
		f.a.logger.Error("could not record the fence in the data dir", "path", f.path, "error", err)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
