package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"

	"github.com/claimd/claimd/structs"
)

// benchHarness applies pre-encoded entries with no test bookkeeping.
type benchHarness struct {
	f     *FSM
	index uint64
}

func (h *benchHarness) must(b *testing.B, mt structs.MessageType, req any) {
	h.index++
	if resp := h.f.apply(h.index, mustEncode(b, mt, req)); resp != nil {
		if err, ok := resp.(error); ok {
			b.Fatalf("setup apply: %v", err)
		}
	}
}

// populate registers node n0..n(nodes-1), volumes v0..v(vols-1) of the given
// mode and one alloc per claim (claimsPerVol per volume), in entries of 1000
// objects. It returns the claim requests, not yet applied.
func populate(b *testing.B, h *benchHarness, nodes, vols, claimsPerVol int, mode structs.AccessMode) []*structs.VolumeClaimRequest {
	for i := 0; i < nodes; i++ {
		h.must(b, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode(fmt.Sprintf("n%d", i))})
	}
	const chunk = 1000
	for i := 0; i < vols; i += chunk {
		var batch []*structs.Volume
		for j := i; j < min(i+chunk, vols); j++ {
			batch = append(batch, testVolume(fmt.Sprintf("v%d", j), mode))
		}
		h.must(b, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: batch})
	}
	var claims []*structs.VolumeClaimRequest
	var allocs []*structs.Alloc
	flush := func() {
		if len(allocs) > 0 {
			h.must(b, structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: allocs})
			allocs = nil
		}
	}
	for k := 0; k < claimsPerVol; k++ {
		for i := 0; i < vols; i++ {
			id := fmt.Sprintf("a%d-%d", k, i)
			node := fmt.Sprintf("n%d", (i+k)%nodes)
			vol := fmt.Sprintf("v%d", i)
			allocs = append(allocs, testAlloc(id, node, vol))
			claims = append(claims, &structs.VolumeClaimRequest{VolumeID: vol, AllocID: id, NodeID: node, Mode: structs.ClaimModeWrite})
			if len(allocs) == chunk {
				flush()
			}
		}
	}
	flush()
	return claims
}

// BenchmarkApplyClaimBatch measures one claim batch entry of 1 and of 100
// new claims, decode included: the cost the leader pays per Raft round.
func BenchmarkApplyClaimBatch(b *testing.B) {
	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			h := &benchHarness{f: New(nil)}
			claims := populate(b, h, 10, b.N*size, 1, structs.AccessModeSingleNodeWriter)
			entries := make([][]byte, b.N)
			for i := range entries {
				entries[i] = mustEncode(b, structs.ClaimBatchRequestType,
					&structs.ClaimBatchRequest{Claims: claims[i*size : (i+1)*size]})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i, e := range entries {
				resp := h.f.apply(h.index+uint64(i)+1, e).(*structs.ClaimBatchResponse)
				if err := resp.Results[0].Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/claim")
		})
	}
}

// BenchmarkApplyReleaseCycle measures the whole life of a claim as
// `claimd bench` drives it, in batches of 32 as the leader's batchers make
// them: a claim batch entry, a release batch entry (each release also opens
// a pending eval) and a checkpoint batch entry that frees the claims (no
// controller) and completes their evals. 10k volumes are registered; the
// pairs are reused once freed. Decode included.
func BenchmarkApplyReleaseCycle(b *testing.B) {
	const size, vols = 32, 10_000
	h := &benchHarness{f: New(nil)}
	claims := populate(b, h, 10, vols, 1, structs.AccessModeSingleNodeWriter)
	cycles := vols / size
	type cycle struct{ claim, release, free []byte }
	entries := make([]cycle, cycles)
	for i := range entries {
		var rel []*structs.VolumeClaimRequest
		var free []*structs.ClaimCheckpointRequest
		for _, c := range claims[i*size : (i+1)*size] {
			rel = append(rel, &structs.VolumeClaimRequest{VolumeID: c.VolumeID, AllocID: c.AllocID, Release: true})
			free = append(free, &structs.ClaimCheckpointRequest{VolumeID: c.VolumeID, AllocID: c.AllocID,
				State: structs.ClaimStateFreed, ExpectedState: structs.ClaimStateUnpublishing, NodeDetached: true})
		}
		entries[i] = cycle{
			claim:   mustEncode(b, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: claims[i*size : (i+1)*size]}),
			release: mustEncode(b, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: rel}),
			free:    mustEncode(b, structs.CheckpointBatchRequestType, &structs.CheckpointBatchRequest{Checkpoints: free}),
		}
	}
	apply := func(e []byte) {
		h.index++
		switch resp := h.f.apply(h.index, e).(type) {
		case *structs.ClaimBatchResponse:
			if err := resp.Results[0].Err(); err != nil {
				b.Fatal(err)
			}
		case *structs.CheckpointBatchResponse:
			if err := resp.Results[0].Error; err != nil {
				b.Fatal(err)
			}
		default:
			b.Fatalf("unexpected response %#v", resp)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := entries[i%cycles]
		apply(c.claim)
		apply(c.release)
		apply(c.free)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/claim")
}

// bigState is 100k volumes with 200k claims (two multi-writer claims per
// volume), 200k allocs on 100 nodes, as one snapshot. Built once.
var bigState = sync.OnceValues(func() (*FSM, []byte) {
	b := &testing.B{}
	h := &benchHarness{f: New(nil)}
	claims := populate(b, h, 100, 100_000, 2, structs.AccessModeMultiNodeMultiWriter)
	for i := 0; i < len(claims); i += 1000 {
		h.index++
		h.f.apply(h.index, mustEncode(b, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: claims[i:min(i+1000, len(claims))]}))
	}
	var buf bytes.Buffer
	snap := newSnapshot(h.f.State())
	if err := snap.write(&buf); err != nil {
		panic(err)
	}
	return h.f, buf.Bytes()
})

// BenchmarkSnapshotRestore100k: persist and restore time and size for 100k
// volumes with 200k claims. Slow to set up (~half a minute), so skipped
// under -short.
func BenchmarkSnapshotRestore100k(b *testing.B) {
	if testing.Short() {
		b.Skip("100k-volume state takes a while to build; run without -short")
	}
	f, data := bigState()
	if v, _ := f.State().VolumeByID(nil, "v99999"); v == nil || len(v.WriteClaims) != 2 {
		b.Fatalf("setup: exp: v99999 with 2 claims got: %+v", v)
	}
	b.Run("persist", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			snap, _ := f.Snapshot()
			var n countWriter
			if err := snap.(*fsmSnapshot).write(&n); err != nil {
				b.Fatal(err)
			}
			snap.Release()
		}
		b.ReportMetric(float64(len(data)), "snapshot-bytes")
	})
	b.Run("restore", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := New(nil).Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(data)), "snapshot-bytes")
	})
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// BenchmarkMemoryPerVolume reports the live heap one volume costs in the
// store (spec as in testVolume), without and with two claims. ns/op is the
// amortized apply cost per volume.
func BenchmarkMemoryPerVolume(b *testing.B) {
	for _, claimsPer := range []int{0, 2} {
		b.Run(fmt.Sprintf("claims=%d", claimsPer), func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			h := &benchHarness{f: New(nil)}
			claims := populate(b, h, 10, b.N, claimsPer, structs.AccessModeMultiNodeMultiWriter)
			for i := 0; i < len(claims); i += 1000 {
				h.must(b, structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: claims[i:min(i+1000, len(claims))]})
			}
			claims = nil
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(h.f)
			// Allocs are in the store too; this is the whole footprint per
			// volume, its allocs included.
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-B/volume")
		})
	}
}
