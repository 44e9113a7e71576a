package client

import (
	"context"
	"time"

	"github.com/claimd/claimd/structs"
)

// Allocation status reports are batched: when many allocations change at
// once (a job of 1,000 stopped together) one Node.UpdateAlloc carries many,
// so the servers commit a few entries instead of a thousand. The batch is
// what queued while the previous call was in flight (one call at a time),
// not a timer's worth: a lone report goes at once, since every handoff
// waits for two of them (the old holder's end, the new holder running).
const statusBatchMax = 512

type statusReport struct {
	update *structs.AllocClientUpdate
	done   chan error
}

type statusBatcher struct {
	a     *Agent
	queue chan statusReport
}

func newStatusBatcher(a *Agent) *statusBatcher {
	return &statusBatcher{a: a, queue: make(chan statusReport, statusBatchMax)}
}

// send queues one update and waits for the batch it joined to be written.
func (b *statusBatcher) send(ctx context.Context, u *structs.AllocClientUpdate) error {
	// A cancelled caller sends nothing: select picks at random among
	// ready cases, and a report of a task cancelled by its allocation's
	// stop must not overtake the stop's own report (reports go at once).
	if err := ctx.Err(); err != nil {
		return err
	}
	r := statusReport{update: u, done: make(chan error, 1)}
	select {
	case b.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *statusBatcher) run() {
	for {
		var batch []statusReport
		select {
		case r := <-b.queue:
			batch = append(batch, r)
		case <-b.a.ctx.Done():
			return
		}
	gather:
		for len(batch) < statusBatchMax {
			select {
			case r := <-b.queue:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		args := &structs.AllocClientUpdateRequest{NodeID: b.a.ident.ID}
		for _, r := range batch {
			args.Allocs = append(args.Allocs, r.update)
		}
		ctx, cancel := context.WithTimeout(b.a.ctx, 30*time.Second)
		var resp structs.GenericResponse
		err := b.a.conn.call(ctx, "Node.UpdateAlloc", args, &resp)
		cancel()
		for _, r := range batch {
			r.done <- err
		}
	}
}
