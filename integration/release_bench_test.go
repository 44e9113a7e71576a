package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// BenchmarkReleasePipeline measures the server-driven release: N allocs
// (one volume each) run on one worker, are stopped together, and the time
// from the stop to each claim being freed is recorded. It reports claims
// freed per second and p50/p99 stop→freed latency. N defaults to 1,000
// (CLAIMD_BENCH_ALLOCS overrides). Production Raft timings; fsync on.
//
//	go test -run XXX -bench ReleasePipeline -benchtime 1x ./integration/
func BenchmarkReleasePipeline(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("CLAIMD_BENCH_ALLOCS")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		runReleasePipeline(b, n)
	}
}

func runReleasePipeline(b *testing.B, n int) {
	workers, _ := strconv.Atoi(os.Getenv("CLAIMD_BENCH_WORKERS"))
	c := harness.NewCluster(b, 3, harness.Options{Configure: func(cfg *server.Config) {
		cfg.RaftMultiplier = 1
		cfg.ReleaseWorkers = workers
	}})
	c.StartAll()
	leader := c.WaitForLeader(30 * time.Second)
	root := filepath.Join(b.TempDir(), "storage")
	node := harness.StartPlugin(b, "w1", hostdir.ModeNode, root)
	ctrl := harness.StartPlugin(b, "ctrl", hostdir.ModeController, root)
	w := c.StartClient("w1", []string{c.Servers[1].Addr}, node.Config())
	c.StartClient("ctrl", []string{c.Servers[2].Addr}, ctrl.Config()).AdmitControllers()
	cl := leader.Client()
	ctx := harness.Ctx(b, 10*time.Minute)
	harness.WaitFor(b, 30*time.Second, func() error {
		p, _, err := cl.Plugin(ctx, "hostdir", structs.QueryOptions{})
		if err != nil || p.NodesHealthy != 1 || p.ControllersHealthy != 1 {
			return fmt.Errorf("plugin not ready: %+v %v", p, err)
		}
		return nil
	})
	var vols []*structs.Volume
	var allocs []*structs.Alloc
	ids := make([]string, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("v%05d", i)
		v := testVolume(id)
		vols = append(vols, v)
		ids[i] = fmt.Sprintf("a%05d", i)
		allocs = append(allocs, &structs.Alloc{ID: ids[i], NodeID: w.NodeID(), Volumes: []*structs.AllocVolumeRequest{{VolumeID: id}}})
	}
	for start := 0; start < n; start += 500 {
		end := min(start+500, n)
		if _, err := cl.RegisterVolumes(ctx, vols[start:end]...); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.PlaceAllocs(ctx, allocs[start:end]...); err != nil {
			b.Fatal(err)
		}
	}
	harness.WaitFor(b, 5*time.Minute, func() error {
		as, _, err := cl.Allocs(ctx, w.NodeID(), structs.QueryOptions{})
		if err != nil {
			return err
		}
		running := 0
		for _, a := range as {
			if a.ClientStatus == structs.AllocClientRunning {
				running++
			}
		}
		if running < n {
			return fmt.Errorf("running %d/%d", running, n)
		}
		return nil
	})

	b.ResetTimer()
	stop := time.Now()
	if _, err := cl.StopAllocs(ctx, ids...); err != nil {
		b.Fatal(err)
	}
	freedAt := map[string]time.Duration{}
	var index uint64
	for len(freedAt) < n {
		vs, meta, err := cl.Volumes(ctx, "", structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		index = meta.Index
		now := time.Since(stop)
		for _, v := range vs {
			if _, done := freedAt[v.ID]; !done && !v.HasClaims() {
				freedAt[v.ID] = now
			}
		}
		if time.Since(stop) > 10*time.Minute {
			b.Fatalf("only %d/%d claims freed after 10 min", len(freedAt), n)
		}
	}
	total := time.Since(stop)
	b.StopTimer()
	lat := make([]time.Duration, 0, n)
	for _, d := range freedAt {
		lat = append(lat, d)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(n)/total.Seconds(), "claims-freed/s")
	b.ReportMetric(float64(lat[n/2].Milliseconds()), "p50-stop-to-freed-ms")
	b.ReportMetric(float64(lat[n*99/100].Milliseconds()), "p99-stop-to-freed-ms")
	b.Logf("%d claims freed in %s", n, total)
}
