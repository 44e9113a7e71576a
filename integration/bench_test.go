package integration

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
)

// BenchmarkWritePath measures the bare write path (one volume registration =
// one Raft entry, fsync on) on a three-server loopback cluster at production
// Raft timings: to the leader and through a follower, 1 and 64 callers.
// It reports writes/s and p50/p99 latency; nothing asserts them.
func BenchmarkWritePath(b *testing.B) {
	c := harness.NewCluster(b, 3, harness.Options{Configure: func(cfg *server.Config) { cfg.RaftMultiplier = 1 }})
	c.StartAll()
	leader := c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]
	var seq atomic.Int64
	for _, target := range []*harness.TestServer{leader, follower} {
		role := "leader"
		if target == follower {
			role = "follower"
		}
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", role, callers), func(b *testing.B) {
				clients := make([]*api.Client, callers)
				for i := range clients {
					// One session per caller, as separate processes would have.
					clients[i] = target.Client()
				}
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for w := 0; w < callers; w++ {
					wg.Add(1)
					go func(cl *api.Client) {
						defer wg.Done()
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							id := fmt.Sprintf("bench-%d", seq.Add(1))
							t0 := time.Now()
							if _, err := cl.RegisterVolumes(harness.Ctx(b, 30*time.Second), testVolume(id)); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t0)
						}
					}(clients[w])
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}
