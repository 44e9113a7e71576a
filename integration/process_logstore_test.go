package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// logStores are the Raft log stores a server can keep its log in, as the
// agent's flag chooses them (decision 34).
var logStores = []struct {
	name string
	args []string
}{{"boltdb", []string{"-raft-log-store", "boltdb"}}, {"wal", []string{"-raft-log-store", "wal"}}}

// A server process killed with SIGKILL while writes stream in keeps every
// write it acknowledged: restarted on its data dir it serves all of them. One server, so that an acknowledged write is
// exactly an entry this store synced (in a cluster another server's copy
// could hide a lost one). Killed three times, each time with writes in
// flight, so that some kills land in the middle of an append. SIGKILL
// loses what the process had not handed to the kernel, not what the
// kernel had not written to the disk; the store's tail handling after a
// torn write is what this checks. Plaintext: it tests the log store, not
// the network.
func TestProcesses_KilledServerKeepsAcknowledgedWrites(t *testing.T) {
	for _, store := range logStores {
		t.Run(store.name, func(t *testing.T) {
			addr := harness.FreeAddr(t)
			srv := harness.StartProcess(t, "s1", append([]string{"agent", "-server", "-bootstrap-expect", "1",
				"-bind", addr, "-data-dir", filepath.Join(t.TempDir(), "s1"), "-node-name", "s1",
				"-raft-multiplier", "0.2"}, store.args...)...)
			cl, err := api.NewClient(api.Config{Addresses: []string{addr}, Timeout: 5 * time.Second, RetryNoLeaderFor: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()

			var (
				mu    sync.Mutex
				acked []string
			)
			ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
			for round := 0; round < 3; round++ {
				waitWritable(t, cl)
				before := ackedCount()
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for w := 0; w < 8; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							id := fmt.Sprintf("r%d-w%d-%d", round, w, i)
							ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
							_, err := cl.RegisterVolumes(ctx, crashTestVolume(id))
							cancel()
							if err != nil {
								// The server is gone: nothing more is acknowledged.
								return
							}
							mu.Lock()
							acked = append(acked, id)
							mu.Unlock()
						}
					}(w)
				}
				// Kill once writes are flowing (bounded: 200 in this round).
				harness.WaitFor(t, 30*time.Second, func() error {
					if n := ackedCount() - before; n < 200 {
						return fmt.Errorf("acknowledged writes this round exp: >= 200 got: %d", n)
					}
					return nil
				})
				srv.Kill()
				close(stop)
				wg.Wait()
				srv.Restart()
			}

			waitWritable(t, cl)
			mu.Lock()
			defer mu.Unlock()
			have := volumeIDs(t, cl)
			var lost []string
			for _, id := range acked {
				if !have[id] {
					lost = append(lost, id)
				}
			}
			if len(lost) > 0 {
				t.Fatalf("after 3 kills exp: all %d acknowledged writes kept got: %d lost, e.g. %v", len(acked), len(lost), lost[:min(5, len(lost))])
			}
			t.Logf("%s: %d acknowledged writes over 3 kills, all kept (%d volumes stored)", store.name, len(acked), len(have))
		})
	}
}

// volumeIDs is the set of volumes the server's cluster has registered.
func volumeIDs(t *testing.T, cl *api.Client) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vols, _, err := cl.Volumes(ctx, "", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := make(map[string]bool, len(vols))
	for _, v := range vols {
		have[v.ID] = true
	}
	return have
}

// waitWritable waits until the server has a leader and takes a write.
func waitWritable(t *testing.T, cl *api.Client) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cl.RegisterVolumes(ctx, crashTestVolume("probe"))
		return err
	})
}

func crashTestVolume(id string) *structs.Volume {
	return &structs.Volume{ID: id, ExternalID: id, PluginID: "hostdir",
		AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}
}
