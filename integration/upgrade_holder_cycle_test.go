package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// release is how one stopped allocation's claim was released, read back
// from the volume's freed claims (Volume.Released keeps each claim's steps,
// every step with the Raft index of the entry that made it).
type release struct {
	alloc, volume string
	claim         *structs.Claim
	// byHolder: the claim reached node-detached in the very entry that
	// released it (its unpublishing step's index), which only an entry
	// that honoured the agent's DetachedVolumes does. The servers' way
	// reaches node-detached (or freed) in a later checkpoint, after the
	// release watcher's NodeDetach.
	byHolder bool
	// serverDetaches: the agent's log lines for a NodeDetachVolume the
	// servers sent it for this allocation.
	serverDetaches int
	// freedAt is the index of the entry that freed the claim.
	freedAt uint64
}

func (r release) String() string {
	way := "servers' node detach"
	if r.byHolder {
		way = "node-detached in the release entry"
	}
	var steps []string
	for _, s := range r.claim.Steps {
		steps = append(steps, fmt.Sprintf("%s@%d", s.State, s.Index))
	}
	return fmt.Sprintf("%s/%s: %s (%s; %d server NodeDetach in the agent log)", r.alloc, r.volume, way, strings.Join(steps, " "), r.serverDetaches)
}

// stepIndex is the index of the claim's step in state s (0: none).
// agentNodeDetaches counts the agent's "node detached volume" log lines
// for alloc: client/csi_endpoint.go logs one for every NodeDetachVolume
// the servers send (the agent's own unmount at a stop does not log it).
func agentNodeDetaches(out, alloc string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "node detached volume") && strings.Contains(line+" ", "alloc="+alloc+" ") {
			n++
		}
	}
	return n
}

// cycle is tryCycle for the test goroutine: a cycle that cannot finish
// fails the test.
func (e *mixedEnv) cycle(t *testing.T, id, vol string) release {
	t.Helper()
	r, err := e.tryCycle(id, vol)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryCycle places allocation id on the agent's node with volume vol, waits
// until the agent runs it (claimed and mounted), stops it, and waits until
// the volume holds no claim and its freed claims include this one. Every
// call is retried until the servers acknowledge it; each wait is bounded.
// It does not touch testing.T, so a background workload may run it.
func (e *mixedEnv) tryCycle(id, vol string) (release, error) {
	err := pollUntil(30*time.Second, func(ctx context.Context) error {
		_, err := e.c.PlaceAllocs(ctx, &structs.Alloc{ID: id, NodeID: e.nodeID,
			Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}})
		return err
	})
	if err == nil {
		err = pollUntil(30*time.Second, func(ctx context.Context) error {
			a, _, err := e.c.Alloc(ctx, id, structs.QueryOptions{})
			if err != nil {
				return err
			}
			if a == nil || a.ClientStatus != structs.AllocClientRunning {
				return fmt.Errorf("alloc %s exp: running got: %+v", id, a)
			}
			return nil
		})
	}
	if err == nil {
		err = pollUntil(30*time.Second, func(ctx context.Context) error {
			_, err := e.c.StopAllocs(ctx, id)
			return err
		})
	}
	var r release
	if err == nil {
		err = pollUntil(30*time.Second, func(ctx context.Context) error {
			v, _, err := e.c.Volume(ctx, vol, structs.QueryOptions{})
			if err != nil {
				return err
			}
			if all := v.AllClaims(); len(all) != 0 {
				return fmt.Errorf("volume %s exp: no claim once %s stopped got: %s", vol, id, describeClaims(all))
			}
			for _, c := range v.Released {
				if c.AllocID == id {
					u := stepIndex(c, structs.ClaimStateUnpublishing)
					r = release{alloc: id, volume: vol, claim: c, freedAt: stepIndex(c, structs.ClaimStateFreed),
						byHolder: u != 0 && stepIndex(c, structs.ClaimStateNodeDetached) == u}
					return nil
				}
			}
			return fmt.Errorf("volume %s exp: %s among its freed claims got: %d others", vol, id, len(v.Released))
		})
	}
	if err != nil {
		return r, fmt.Errorf("claim cycle of %s on %s: %w", id, vol, err)
	}
	r.serverDetaches = agentNodeDetaches(e.agent.Output(), id)
	return r, nil
}

// pollUntil calls fn (each call bounded by 10 s) until it returns nil or
// timeout has passed, and returns its last error: harness.WaitFor for a
// goroutine that is not the test's.
func pollUntil(timeout time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	pace := 5 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pace)
		pace = min(2*pace, 100*time.Millisecond)
	}
}

// background is a claim workload in its own goroutine: cycle after cycle
// over its volumes until stopped, each release recorded. It runs while a
// server is replaced, so releases are in flight when the gate opens.
type background struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	rs   []release
	err  error
}

func (e *mixedEnv) startBackground(prefix string, vols []string) *background {
	b := &background{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for n := 0; ; n++ {
			select {
			case <-b.stop:
				return
			default:
			}
			// A cycle, once begun, is finished: no allocation is left
			// running or a release half-way when the workload stops.
			r, err := e.tryCycle(fmt.Sprintf("%s%03d", prefix, n), vols[n%len(vols)])
			b.mu.Lock()
			if err != nil {
				b.err = err
			} else {
				b.rs = append(b.rs, r)
			}
			b.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return b
}

// wait stops the workload after its current cycle and returns its
// releases; a cycle that could not finish fails the test.
func (b *background) wait(t *testing.T) []release {
	t.Helper()
	close(b.stop)
	<-b.done
	if b.err != nil {
		t.Fatalf("background workload: %v", b.err)
	}
	return b.rs
}

// count is how many cycles the workload has finished.
func (b *background) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.rs)
}
