package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/structs"
)

// A plugin away for a few seconds leaves gRPC's connect backoff at
// seconds (1 s, 1.6 s, 2.56 s, …): once it is back, calls keep failing
// until the next attempt. Reconnect ends the backoff: the connection is
// ready at once and calls go through. The 1.5 s given to Reconnect is
// the mechanism's margin, not a speed target: without the reset the
// next attempt is at least 1.6 s away (2.56 s less 20% jitter, less the
// time since the last attempt is bounded by waiting past it).
func TestClientReconnectEndsTheConnectBackoff(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "p.sock")
	c, err := NewClient("unix://"+sock, ClientOptions{PluginID: "hostdir"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Away: the first call fails and starts the connect backoff; the
	// attempts at about 1 s and 2.6 s fail too.
	if _, err := c.Probe(testCtx(t)); !errors.Is(err, structs.ErrUnavailable) {
		t.Fatalf("probe of a missing plugin exp: unavailable got: %v", err)
	}
	time.Sleep(3 * time.Second) // the plugin's time away is the scenario
	p, err := hostdir.New(hostdir.Config{Endpoint: "unix://" + sock, Root: filepath.Join(t.TempDir(), "root"),
		NodeID: "ext-node-1", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if !c.Reconnect(ctx) {
		t.Fatal("reconnect to the plugin that is back exp: ready got: not within the backoff's remaining wait")
	}
	if ok, err := c.Probe(testCtx(t)); err != nil || !ok {
		t.Fatalf("probe after reconnect exp: ready got: %v %v", ok, err)
	}
}
