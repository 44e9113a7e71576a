package server

import (
	"fmt"
	"sync/atomic"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/structs"
)

// Group commit. Requests that arrive at the leader while earlier batches
// are committing are gathered into one batch entry, so one Raft round (one
// fsync on each server) serves many callers. The FSM applies the items in
// order and answers each separately, so one refused item never fails the
// others. Two batchers use this: claims and releases from Volume.Claim
// (the claim batch entry), and the release workers' checkpoints (the
// checkpoint batch entry).
const (
	// maxItemsPerBatch keeps one entry small enough to replicate in one
	// AppendEntries and to apply in well under a millisecond.
	maxItemsPerBatch = 256
	// maxBatchesInFlight: one. The next batch fills while this one
	// commits, and the three servers here share one disk whose fsyncs
	// queue, so a second entry in flight mostly lengthens both rounds
	// (measured: BenchmarkClaimPath, 64 callers, 3.0-3.3k claims/s with
	// two in flight, 4.5k with one and the linger below).
	maxBatchesInFlight = 1
	// maxLinger bounds how long a batch waits for the requests it expects:
	// the callers the last commit answered are sending their next requests
	// right now, and an entry that carries them all (with those that queued
	// during the commit) saves a round of fsyncs. A lone caller never waits.
	maxLinger     = time.Millisecond
	batchQueueLen = 8192
)

type outcome[Res any] struct {
	res   Res
	index uint64
	err   error
}

type pending[Req, Res any] struct {
	req  Req
	done chan outcome[Res]
}

// batcher gathers requests into batches; run is its one goroutine. commit
// applies one batch and returns a result per item, in order, or an error
// that every item of the batch gets.
type batcher[Req, Res any] struct {
	// name labels the batcher's metrics ("claim", "checkpoint").
	name     string
	commitFn func([]Req) ([]Res, uint64, error)
	queue    chan *pending[Req, Res]
	inflight chan struct{}
	stopCh   <-chan struct{}
	// expect is how many requests the next batch should carry: set when
	// a commit ends, to the callers it answered (who are about to send
	// their next requests) plus those already queued.
	expect atomic.Int64
}

func newBatcher[Req, Res any](name string, commit func([]Req) ([]Res, uint64, error), stopCh <-chan struct{}) *batcher[Req, Res] {
	return &batcher[Req, Res]{
		name:     name,
		commitFn: commit,
		queue:    make(chan *pending[Req, Res], batchQueueLen),
		inflight: make(chan struct{}, maxBatchesInFlight),
		stopCh:   stopCh,
	}
}

// submit queues one request and waits for its own result.
func (b *batcher[Req, Res]) submit(req Req) (Res, uint64, error) {
	var zero Res
	p := &pending[Req, Res]{req: req, done: make(chan outcome[Res], 1)}
	select {
	case b.queue <- p:
	case <-b.stopCh:
		return zero, 0, structs.ErrShutdown
	}
	select {
	case out := <-p.done:
		return out.res, out.index, out.err
	case <-b.stopCh:
		return zero, 0, structs.ErrShutdown
	}
}

func (b *batcher[Req, Res]) run() {
	for {
		var first *pending[Req, Res]
		select {
		case first = <-b.queue:
		case <-b.stopCh:
			return
		}
		// Wait for a commit slot first: whatever queues meanwhile joins
		// this batch.
		select {
		case b.inflight <- struct{}{}:
		case <-b.stopCh:
			first.done <- outcome[Res]{err: structs.ErrShutdown}
			return
		}
		batch := b.gather(first)
		go b.commit(batch)
	}
}

// gather takes what is queued behind first, up to maxItemsPerBatch. Short
// of what it expects (see expect) it waits up to maxLinger for more.
func (b *batcher[Req, Res]) gather(first *pending[Req, Res]) []*pending[Req, Res] {
	batch := []*pending[Req, Res]{first}
	var linger <-chan time.Time
	for len(batch) < maxItemsPerBatch {
		select {
		case p := <-b.queue:
			batch = append(batch, p)
			continue
		default:
		}
		if len(batch) >= int(b.expect.Load()) {
			return batch
		}
		if linger == nil {
			t := time.NewTimer(maxLinger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case p := <-b.queue:
			batch = append(batch, p)
		case <-linger:
			return batch
		case <-b.stopCh:
			return batch
		}
	}
	return batch
}

func (b *batcher[Req, Res]) commit(batch []*pending[Req, Res]) {
	defer func() { <-b.inflight }()
	reqs := make([]Req, len(batch))
	for i, p := range batch {
		reqs[i] = p.req
	}
	labels := []metrics.Label{{Name: "batch", Value: b.name}}
	metrics.AddSampleWithLabels([]string{"batch", "size"}, float32(len(batch)), labels)
	start := time.Now()
	results, index, err := b.commitFn(reqs)
	metrics.MeasureSinceWithLabels([]string{"batch", "commit_time"}, start, labels)
	// Counted before anyone is answered, so that an answered caller's next
	// request is not counted twice.
	b.expect.Store(int64(min(len(batch)+len(b.queue), maxItemsPerBatch)))
	if err == nil && len(results) != len(batch) {
		err = structs.NewError(structs.CodeUnavailable, fmt.Sprintf("batch of %d: FSM answered %d results", len(batch), len(results)))
	}
	for i, p := range batch {
		if err != nil {
			p.done <- outcome[Res]{index: index, err: err}
			continue
		}
		p.done <- outcome[Res]{res: results[i], index: index}
	}
}

func holderDetachedIn(reqs []*structs.VolumeClaimRequest) bool {
	for _, r := range reqs {
		if r.NodeDetached {
			return true
		}
	}
	return false
}

// commitClaims applies a claim batch entry.
func (s *Server) commitClaims(reqs []*structs.VolumeClaimRequest) ([]*structs.ClaimResult, uint64, error) {
	t := structs.ClaimBatchRequestType
	if holderDetachedIn(reqs) {
		if s.AllServersSupport(structs.FeatureHolderDetached) {
			t = structs.ClaimBatchDetachedRequestType
		} else {
			// Some server would not apply it: the releases take the
			// servers' node detach (a no-op once the node did it).
			for _, r := range reqs {
				r.NodeDetached = false
			}
		}
	}
	resp, index, err := applyAs[*structs.ClaimBatchResponse](s, t, &structs.ClaimBatchRequest{Claims: reqs})
	if err != nil {
		return nil, index, err
	}
	return resp.Results, index, nil
}

// commitCheckpoints applies a checkpoint batch entry.
func (s *Server) commitCheckpoints(reqs []*structs.ClaimCheckpointRequest) ([]*structs.CheckpointResult, uint64, error) {
	resp, index, err := applyAs[*structs.CheckpointBatchResponse](s, structs.CheckpointBatchRequestType, &structs.CheckpointBatchRequest{Checkpoints: reqs})
	if err != nil {
		return nil, index, err
	}
	return resp.Results, index, nil
}

// applyAs applies an entry whose FSM response must be a T.
func applyAs[T any](s *Server, t structs.MessageType, msg any) (T, uint64, error) {
	var zero T
	raw, index, err := s.Apply(t, msg)
	if err != nil {
		return zero, index, err
	}
	resp, ok := raw.(T)
	if !ok {
		return zero, index, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("entry type %d: unexpected FSM response %T", t, raw))
	}
	return resp, index, nil
}

// Checkpoint records one claim checkpoint through the checkpoint batcher:
// concurrent release workers share entries. It answers like Apply of a
// single checkpoint: the response, the entry's index, the item's refusal.
func (s *Server) Checkpoint(req *structs.ClaimCheckpointRequest) (*structs.ClaimCheckpointResponse, uint64, error) {
	res, index, err := s.checkpoints.submit(req)
	if err != nil {
		return nil, index, err
	}
	if err := res.Err(); err != nil {
		return nil, index, err
	}
	return &structs.ClaimCheckpointResponse{Claim: res.Claim}, index, nil
}
