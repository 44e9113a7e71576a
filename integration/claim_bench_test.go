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
	"github.com/claimd/claimd/structs"
)

// BenchmarkClaimPath measures Volume.Claim (new claims on distinct volumes,
// group-committed at the leader) on a three-server loopback cluster in one
// process, production timings, fsync on: claims/s and p50/p99, to the
// leader and through a follower, 1 and 64 callers. Allocations and volumes
// are prepared before the timer starts.
func BenchmarkClaimPath(b *testing.B) {
	// The bench node has no agent: it must not time out mid-run.
	c := harness.NewCluster(b, 3, harness.Options{Configure: func(cfg *server.Config) {
		cfg.RaftMultiplier = 1
		cfg.HeartbeatTTL = time.Hour
	}})
	c.StartAll()
	leader := c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]
	setup := leader.Client()
	ctx := harness.Ctx(b, 30*time.Minute)
	node := &structs.Node{ID: "bench-node", SecretID: "s", Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true}}}
	if _, err := setup.RegisterNode(ctx, node); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	// prepare registers n volumes with one alloc each and returns the pairs.
	prepare := func(n int) [][2]string {
		pairs := make([][2]string, n)
		for start := 0; start < n; start += 500 {
			end := min(start+500, n)
			var vols []*structs.Volume
			var allocs []*structs.Alloc
			for i := start; i < end; i++ {
				k := seq.Add(1)
				v := testVolume(fmt.Sprintf("bv%07d", k))
				a := &structs.Alloc{ID: fmt.Sprintf("ba%07d", k), NodeID: node.ID, Volumes: []*structs.AllocVolumeRequest{{VolumeID: v.ID}}}
				vols, allocs = append(vols, v), append(allocs, a)
				pairs[i] = [2]string{v.ID, a.ID}
			}
			if _, err := setup.RegisterVolumes(ctx, vols...); err != nil {
				b.Fatal(err)
			}
			if _, err := setup.PlaceAllocs(ctx, allocs...); err != nil {
				b.Fatal(err)
			}
		}
		return pairs
	}
	for _, target := range []*harness.TestServer{leader, follower} {
		role := "leader"
		if target == follower {
			role = "follower"
		}
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", role, callers), func(b *testing.B) {
				pairs := prepare(b.N)
				clients := make([]*api.Client, callers)
				for i := range clients {
					clients[i] = target.Client()
				}
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				idx0 := leader.Server().Raft().LastIndex()
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
							t0 := time.Now()
							_, err := cl.Claim(ctx, &structs.VolumeClaimRequest{VolumeID: pairs[i][0], AllocID: pairs[i][1], NodeID: node.ID, Mode: structs.ClaimModeWrite})
							if err != nil {
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
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "claims/s")
				// Entries include heartbeat-driven ones (none here: the
				// bench node has no agent) and so bound the batch size below.
				b.ReportMetric(float64(b.N)/float64(max(leader.Server().Raft().LastIndex()-idx0, 1)), "claims/entry")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}
