package forward

import (
	"context"
	"errors"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// Pool keeps one multiplexed session per server address. Safe for
// concurrent use; Shutdown closes every session.
type Pool struct {
	dial   rpc.Dialer
	logger hclog.Logger

	mu       sync.Mutex
	conns    map[string]*poolEntry
	shutdown bool
}

// poolEntry lets concurrent callers share one dial in progress.
type poolEntry struct {
	ready  chan struct{}
	client *rpc.MuxClient
	err    error
}

// NewPool makes a pool that dials with dial (nil = plain TCP).
func NewPool(dial rpc.Dialer, logger hclog.Logger) *Pool {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Pool{dial: dial, logger: logger.Named("pool"), conns: map[string]*poolEntry{}}
}

func (p *Pool) get(ctx context.Context, addr string) (*rpc.MuxClient, error) {
	p.mu.Lock()
	if p.shutdown {
		p.mu.Unlock()
		return nil, structs.ErrShutdown
	}
	e, ok := p.conns[addr]
	if ok {
		select {
		case <-e.ready:
			if e.err == nil && !e.client.IsClosed() {
				p.mu.Unlock()
				return e.client, nil
			}
			// Failed or closed: dial again below.
		default:
			p.mu.Unlock()
			select {
			case <-e.ready:
				if e.err != nil {
					return nil, e.err
				}
				return e.client, nil
			case <-ctx.Done():
				return nil, structs.NewError(structs.CodeTimeout, "waiting for connection to "+addr)
			}
		}
	}
	e = &poolEntry{ready: make(chan struct{})}
	p.conns[addr] = e
	p.mu.Unlock()

	e.client, e.err = rpc.DialMux(ctx, p.dial, addr, p.logger)
	close(e.ready)
	if e.err != nil {
		p.mu.Lock()
		if p.conns[addr] == e {
			delete(p.conns, addr)
		}
		p.mu.Unlock()
	}
	return e.client, e.err
}

// RPC calls method on the server at addr.
func (p *Pool) RPC(ctx context.Context, addr, method string, args, reply any) error {
	c, err := p.get(ctx, addr)
	if err != nil {
		return err
	}
	err = c.Call(ctx, method, args, reply)
	if err != nil && errors.Is(err, structs.ErrUnavailable) && c.IsClosed() {
		p.drop(addr, c)
	}
	return err
}

// drop forgets a dead session so the next call dials again.
func (p *Pool) drop(addr string, c *rpc.MuxClient) {
	p.mu.Lock()
	if e, ok := p.conns[addr]; ok {
		// An entry still dialling is a newer session, not this one (and
		// its client field is being written).
		select {
		case <-e.ready:
			if e.client == c {
				delete(p.conns, addr)
			}
		default:
		}
	}
	p.mu.Unlock()
	c.Close()
}

// Shutdown closes every session; later calls fail with ErrShutdown.
func (p *Pool) Shutdown() {
	p.mu.Lock()
	p.shutdown = true
	conns := p.conns
	p.conns = map[string]*poolEntry{}
	p.mu.Unlock()
	for _, e := range conns {
		<-e.ready
		if e.client != nil {
			e.client.Close()
		}
	}
}
