package server

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// echoCommit answers every item with its own value times ten and counts
// the batches it saw.
type echoCommit struct {
	batches atomic.Int64
	items   atomic.Int64
	delay   time.Duration // stands in for a Raft round
	fail    func(reqs []int) error
}

func (e *echoCommit) commit(reqs []int) ([]int, uint64, error) {
	e.batches.Add(1)
	e.items.Add(int64(len(reqs)))
	if e.delay > 0 {
		time.Sleep(e.delay)
	}
	if e.fail != nil {
		if err := e.fail(reqs); err != nil {
			return nil, 7, err
		}
	}
	out := make([]int, len(reqs))
	for i, r := range reqs {
		out[i] = r * 10
	}
	return out, uint64(e.batches.Load()), nil
}

func startBatcher(t testing.TB, commit func([]int) ([]int, uint64, error)) (*batcher[int, int], func()) {
	stop := make(chan struct{})
	b := newBatcher("test", commit, stop)
	done := make(chan struct{})
	go func() { b.run(); close(done) }()
	return b, func() { close(stop); <-done }
}

func TestBatcher_EachCallerGetsItsOwnResultAndCallsShareCommits(t *testing.T) {
	e := &echoCommit{delay: 2 * time.Millisecond}
	b, stop := startBatcher(t, e.commit)
	defer stop()
	const callers, perCaller = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perCaller {
				v := c*1000 + i
				got, _, err := b.submit(v)
				if err != nil || got != v*10 {
					errs <- fmt.Errorf("submit %d: exp: %d got: %d, %v", v, v*10, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := e.items.Load(); n != callers*perCaller {
		t.Fatalf("exp: %d items committed got: %d", callers*perCaller, n)
	}
	// 32 callers that each wait for their answer: batches must hold many.
	if batches := e.batches.Load(); batches*4 > callers*perCaller {
		t.Fatalf("exp: at least 4 items per batch on average got: %d batches for %d items", batches, callers*perCaller)
	}
}

func TestBatcher_ACommitErrorReachesEveryItemOfItsBatchOnly(t *testing.T) {
	boom := errors.New("no quorum")
	e := &echoCommit{fail: func(reqs []int) error {
		for _, r := range reqs {
			if r < 0 {
				return boom
			}
		}
		return nil
	}}
	b, stop := startBatcher(t, e.commit)
	defer stop()
	if _, idx, err := b.submit(-1); !errors.Is(err, boom) || idx != 7 {
		t.Fatalf("exp: the commit error and its index got: %d, %v", idx, err)
	}
	if got, _, err := b.submit(4); err != nil || got != 40 {
		t.Fatalf("exp: the next batch unaffected got: %d, %v", got, err)
	}
}

func TestBatcher_WrongResultCountIsAnErrorNotAMixUp(t *testing.T) {
	b, stop := startBatcher(t, func(reqs []int) ([]int, uint64, error) { return make([]int, len(reqs)+1), 1, nil })
	defer stop()
	if _, _, err := b.submit(1); !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("exp: unavailable got: %v", err)
	}
}

func TestBatcher_ShutdownAnswersWaitingCallers(t *testing.T) {
	release := make(chan struct{})
	b, stop := startBatcher(t, func(reqs []int) ([]int, uint64, error) {
		<-release
		return make([]int, len(reqs)), 1, nil
	})
	defer close(release)
	errc := make(chan error, 1)
	go func() { _, _, err := b.submit(1); errc <- err }()
	stop()
	select {
	case err := <-errc:
		if !errors.Is(err, structs.ErrShutdown) {
			t.Fatalf("exp: shutdown got: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller waiting on a stopped batcher was never answered")
	}
}

// BenchmarkBatcher measures the batcher alone over a commit that takes
// a fixed 2 ms (about one Raft round here): items per batch and the
// overhead per item, for 1 and 64 callers.
func BenchmarkBatcher(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			e := &echoCommit{delay: 2 * time.Millisecond}
			bt, stop := startBatcher(b, e.commit)
			defer stop()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, _, err := bt.submit(1); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(e.items.Load())/float64(e.batches.Load()), "items/batch")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}
