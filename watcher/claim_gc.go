package watcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/claimd/claimd/structs"
)

// The claim GC is the safety net behind the evals: it finds every volume
// with past claims and no pending eval (a lost eval, a bug, a restore from
// an old snapshot) and creates one, so that nothing is ever stranded. It
// runs every GCInterval and on demand (`claimd system gc`).

func (w *Watcher) claimGCLoop(ctx context.Context) {
	t := time.NewTicker(w.gcInterval())
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.runClaimGC(false)
		case <-w.gcReset:
			t.Reset(w.gcInterval())
		case reply := <-w.gcNow:
			reply <- w.runClaimGC(true)
		case <-ctx.Done():
			return
		}
	}
}

// RunClaimGC runs the claim GC now and returns how many evals it created.
// It does not wait for any release: a stuck release never blocks it
// (seed 2). Every volume with past claims is retried at once, skipping its
// backoff.
func (w *Watcher) RunClaimGC(ctx context.Context) (int, error) {
	w.mu.Lock()
	enabled, gcNow := w.enabled, w.gcNow
	w.mu.Unlock()
	if !enabled {
		return 0, structs.NewError(structs.CodeNoLeader, "claim GC runs on the leader only")
	}
	reply := make(chan int, 1)
	select {
	case gcNow <- reply:
	case <-ctx.Done():
		return 0, structs.NewError(structs.CodeTimeout, "claim GC is busy")
	}
	select {
	case n := <-reply:
		return n, nil
	case <-ctx.Done():
		return 0, structs.NewError(structs.CodeTimeout, "claim GC did not finish in time")
	}
}

func (w *Watcher) runClaimGC(force bool) int {
	state := w.state.State()
	vols, err := state.Volumes(nil, "")
	if err != nil {
		w.logger.Error("claim GC: reading volumes", "error", err)
		return 0
	}
	var evals []*structs.Eval
	var withPast []string
	for _, v := range vols {
		if len(v.PastClaims) == 0 {
			continue
		}
		withPast = append(withPast, v.ID)
		pending := false
		existing, err := state.EvalsByVolume(nil, v.ID)
		if err != nil {
			w.logger.Error("claim GC: reading evals", "volume", v.ID, "error", err)
			continue
		}
		for _, e := range existing {
			if e.Status == structs.EvalStatusPending {
				pending = true
				break
			}
		}
		if !pending {
			evals = append(evals, &structs.Eval{ID: newEvalID(), Type: structs.EvalTypeVolumeClaimGC,
				VolumeID: v.ID, Status: structs.EvalStatusPending, TriggeredBy: "claim-gc"})
		}
	}
	if len(evals) > 0 {
		if _, _, err := w.apply.Apply(structs.EvalUpsertRequestType, &structs.EvalUpsertRequest{Evals: evals}); err != nil {
			w.logger.Error("claim GC: creating evals", "error", err)
			return 0
		}
		w.logger.Info("claim GC created evals for stranded past claims", "evals", len(evals))
	}
	if force {
		for _, id := range withPast {
			w.enqueue(id, true)
		}
	}
	return len(evals)
}

// newEvalID is random: the leader picks it and the log carries it, so every
// server stores the same one.
func newEvalID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// RetryNode retries at once every release in backoff that waits on a node
// (the node registered again: it reconnected, or its plugins' health
// changed, which is when a node plugin that was away is back): the event,
// not the backoff's timer, ends the wait (issue 41). Only volumes this
// worker holds work for are looked at.
func (w *Watcher) RetryNode(nodeID string) {
	w.mu.Lock()
	var waiting []string
	for id, v := range w.vols {
		if v.timer != nil {
			waiting = append(waiting, id)
		}
	}
	w.mu.Unlock()
	state := w.state.State()
	for _, id := range waiting {
		vol, err := state.VolumeByID(nil, id)
		if err != nil || vol == nil {
			continue
		}
		for _, c := range vol.PastClaims {
			if c.NodeID == nodeID {
				w.enqueue(id, true)
				break
			}
		}
	}
}
