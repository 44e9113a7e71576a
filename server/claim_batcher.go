package server

import (
	"fmt"

	"github.com/claimd/claimd/structs"
)

// Group commit for claims. Claims and releases that arrive at the leader
// while earlier batches are committing are gathered into one claim batch
// entry, so one Raft round (one fsync on each server) serves many claims.
// The FSM applies the items in order and answers each separately, so one
// refused claim never fails the others.
const (
	// maxClaimsPerBatch keeps one entry small enough to replicate in one
	// AppendEntries and to apply in well under a millisecond.
	maxClaimsPerBatch = 256
	// maxBatchesInFlight lets a second batch fill while the first commits.
	// With one, throughput halves (nothing is gathered during a commit);
	// more than two adds entries without adding fsyncs saved.
	maxBatchesInFlight = 2
	claimQueueLen      = 8192
)

type claimOutcome struct {
	res   *structs.ClaimResult
	index uint64
	err   error
}

type pendingClaim struct {
	req  *structs.VolumeClaimRequest
	done chan claimOutcome
}

// claimBatcher is owned by the server; run is its one goroutine.
type claimBatcher struct {
	apply    func(t structs.MessageType, msg any) (any, uint64, error)
	queue    chan *pendingClaim
	inflight chan struct{}
	stopCh   <-chan struct{}
}

func newClaimBatcher(apply func(structs.MessageType, any) (any, uint64, error), stopCh <-chan struct{}) *claimBatcher {
	return &claimBatcher{
		apply:    apply,
		queue:    make(chan *pendingClaim, claimQueueLen),
		inflight: make(chan struct{}, maxBatchesInFlight),
		stopCh:   stopCh,
	}
}

// submit queues one claim and waits for its own result.
func (b *claimBatcher) submit(req *structs.VolumeClaimRequest) (*structs.ClaimResult, uint64, error) {
	p := &pendingClaim{req: req, done: make(chan claimOutcome, 1)}
	select {
	case b.queue <- p:
	case <-b.stopCh:
		return nil, 0, structs.ErrShutdown
	}
	select {
	case out := <-p.done:
		return out.res, out.index, out.err
	case <-b.stopCh:
		return nil, 0, structs.ErrShutdown
	}
}

func (b *claimBatcher) run() {
	for {
		var first *pendingClaim
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
			first.done <- claimOutcome{err: structs.ErrShutdown}
			return
		}
		batch := []*pendingClaim{first}
	gather:
		for len(batch) < maxClaimsPerBatch {
			select {
			case p := <-b.queue:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		go b.commit(batch)
	}
}

func (b *claimBatcher) commit(batch []*pendingClaim) {
	defer func() { <-b.inflight }()
	req := &structs.ClaimBatchRequest{Claims: make([]*structs.VolumeClaimRequest, len(batch))}
	for i, p := range batch {
		req.Claims[i] = p.req
	}
	raw, index, err := b.apply(structs.ClaimBatchRequestType, req)
	if err != nil {
		for _, p := range batch {
			p.done <- claimOutcome{index: index, err: err}
		}
		return
	}
	resp, ok := raw.(*structs.ClaimBatchResponse)
	if !ok || len(resp.Results) != len(batch) {
		err := structs.NewError(structs.CodeUnavailable, fmt.Sprintf("claim batch: unexpected FSM response %T", raw))
		for _, p := range batch {
			p.done <- claimOutcome{index: index, err: err}
		}
		return
	}
	for i, p := range batch {
		p.done <- claimOutcome{res: resp.Results[i], index: index}
	}
}
