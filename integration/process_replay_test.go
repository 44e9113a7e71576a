package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// Issue 37, item 2: S2 across kill -9 and restart. Three server processes
// take a write load of volume registrations, placements, claims and
// releases (claims record the leader's append time of their entries, which
// the log store keeps); four times a server picked at random is killed
// with SIGKILL at a random point of the load, the other two take more
// writes, and it is restarted on its data dir, where Raft replays its log
// (no snapshot: the load stays below the snapshot threshold) and it catches
// up from the leader. Once the load stops, every server must hash the same
// state at the same index: the restarted ones rebuilt theirs from the log
// their store kept through the kill. On each log store.
func TestProcesses_KilledServersReplayToTheSameState(t *testing.T) {
	const kills = 4
	for _, store := range logStores {
		t.Run(store.name, func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 0))

			dir := t.TempDir()
			addrs := []string{harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)}
			procs := make([]*harness.Process, len(addrs))
			for i := range addrs {
				name := fmt.Sprintf("s%d", i+1)
				procs[i] = harness.StartProcess(t, name, append([]string{"agent", "-server",
					"-bootstrap-expect", "3", "-join", harness.JoinOthers(addrs, i),
					"-bind", addrs[i], "-data-dir", filepath.Join(dir, name), "-node-name", name,
					"-raft-multiplier", "0.2",
					// The load's node never heartbeats and has no session: it
					// must not be marked down, and the releases' node detach,
					// which cannot reach it, is tried once, not in a loop.
					"-heartbeat-ttl", "1h", "-release-backoff-base", "1h", "-release-backoff-max", "1h"},
					store.args...)...)
			}
			cl, err := api.NewClient(api.Config{Addresses: addrs, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			waitWritable(t, cl)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err = cl.RegisterNode(ctx, &structs.Node{ID: "n1", SecretID: "n1-secret", Status: structs.NodeStatusReady,
				CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, ExternalNodeID: "ext-n1"}}})
			cancel()
			if err != nil {
				t.Fatal(err)
			}

			load := startReplayLoad(cl, 8)
			defer load.stop()
			for round := 0; round < kills; round++ {
				victim := rng.IntN(len(procs))
				// A random point of the load: after 50-400 more writes.
				load.waitAcked(t, 50+rng.IntN(351))
				procs[victim].Kill()
				t.Logf("round %d: killed %s after %d acknowledged writes", round, procs[victim].Name, load.acked.Load())
				// The two left take 0-200 writes (an election first when
				// the victim led) before it comes back.
				load.waitAcked(t, rng.IntN(201))
				procs[victim].Restart()
			}
			// Writes go on through the last restart, then stop. One more
			// registration (a new volume: it changes the state) marks the
			// end of the log the servers must all have applied.
			load.waitAcked(t, 20)
			load.stop()
			ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
			end, err := cl.RegisterVolumes(ctx, crashTestVolume("end"))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			last := end.RegisterIndex
			t.Logf("%d writes acknowledged (%d failed: a server killed under them, an election), the last at index %d",
				load.acked.Load(), load.failed.Load(), last)

			// Every server, restarted or not, hashes the same state once all
			// have applied the last acknowledged write. A digest names the
			// index of the state it hashed, so equal indexes must mean equal
			// hashes (S2).
			digests := make([]*structs.StateDigest, len(addrs))
			harness.WaitFor(t, 60*time.Second, func() error {
				for i, a := range addrs {
					d, err := digestOf(a)
					if err != nil {
						return fmt.Errorf("%s: %w", procs[i].Name, err)
					}
					digests[i] = d
				}
				for i, d := range digests {
					if d.AppliedIndex < last || d.AppliedIndex != digests[0].AppliedIndex {
						return fmt.Errorf("state indexes exp: one index >= %d on every server got: %s (%s at %d)",
							last, describeStateDigests(procs, digests), procs[i].Name, d.AppliedIndex)
					}
				}
				return nil
			})
			for _, d := range digests[1:] {
				if d.SHA256 != digests[0].SHA256 {
					t.Fatalf("S2 after %d kills and restarts (%s): exp: one state digest at index %d got: %s",
						kills, store.name, digests[0].AppliedIndex, describeStateDigests(procs, digests))
				}
			}
			t.Logf("%s: all servers hash %.12s at index %d (%d bytes)", store.name, digests[0].SHA256, digests[0].AppliedIndex, digests[0].Bytes)
		})
	}
}

// digestOf asks one server for its own state digest.
func digestOf(addr string) (*structs.StateDigest, error) {
	cl, err := api.NewClient(api.Config{Addresses: []string{addr}, Timeout: 10 * time.Second, RetryNoLeaderFor: -1})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.StateDigest(ctx)
}

func describeStateDigests(procs []*harness.Process, ds []*structs.StateDigest) string {
	var parts []string
	for i, d := range ds {
		parts = append(parts, fmt.Sprintf("%s@%d=%.12s", procs[i].Name, d.AppliedIndex, d.SHA256))
	}
	return strings.Join(parts, " ")
}

// replayLoad is writers that each go round registering a volume, placing
// an allocation on n1 that requests it, claiming it for writing and
// releasing it: four entries of four kinds, the claim and the release
// through the claim batcher. A write that fails (its server was killed,
// an election) ends the writer's round, and it starts the next with new
// IDs.
type replayLoad struct {
	cl     *api.Client
	quit   chan struct{}
	wg     sync.WaitGroup
	acked  atomic.Int64
	failed atomic.Int64
	once   sync.Once
}

func startReplayLoad(cl *api.Client, writers int) *replayLoad {
	l := &replayLoad{cl: cl, quit: make(chan struct{})}
	for w := 0; w < writers; w++ {
		l.wg.Add(1)
		go l.writer(w)
	}
	return l
}

func (l *replayLoad) writer(w int) {
	defer l.wg.Done()
	for i := 0; ; i++ {
		id := fmt.Sprintf("w%d-%d", w, i)
		alloc := "a-" + id
		steps := []func(ctx context.Context) error{
			func(ctx context.Context) error {
				_, err := l.cl.RegisterVolumes(ctx, crashTestVolume(id))
				return err
			},
			func(ctx context.Context) error {
				_, err := l.cl.PlaceAllocs(ctx, &structs.Alloc{ID: alloc, NodeID: "n1",
					Volumes: []*structs.AllocVolumeRequest{{VolumeID: id}}})
				return err
			},
			func(ctx context.Context) error {
				_, err := l.cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: id, AllocID: alloc, NodeID: "n1", Mode: structs.ClaimModeWrite})
				return err
			},
			func(ctx context.Context) error {
				_, err := l.cl.Release(ctx, id, alloc)
				return err
			},
		}
		for _, step := range steps {
			select {
			case <-l.quit:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := step(ctx)
			cancel()
			if err != nil {
				l.failed.Add(1)
				break
			}
			l.acked.Add(1)
		}
	}
}

// waitAcked waits until n more writes have been acknowledged.
func (l *replayLoad) waitAcked(t *testing.T, n int) {
	t.Helper()
	want := l.acked.Load() + int64(n)
	harness.WaitFor(t, 60*time.Second, func() error {
		if got := l.acked.Load(); got < want {
			return fmt.Errorf("acknowledged writes exp: >= %d got: %d (%d failed)", want, got, l.failed.Load())
		}
		return nil
	})
}

// stop ends the load and waits for its writers.
func (l *replayLoad) stop() {
	l.once.Do(func() { close(l.quit) })
	l.wg.Wait()
}
