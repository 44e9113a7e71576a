package integration

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// A node plugin killed (its socket file left behind, as kill -9 leaves
// it) while a release waits on it, and started again before any probe
// could see it away: the agent sees the new socket, reconnects and
// registers again, and the release goes on at once (issue 41). Without
// that the node's fingerprint never changes (the probe runs once an
// hour here), nothing tells the servers, and the release waits out its
// 60 s backoff.
func TestRelease_PluginRestartedBetweenProbesRetriesAtOnce(t *testing.T) {
	const backoff = 60 * time.Second
	e := newReleaseEnvOpts(t, harness.Options{
		Configure: func(cfg *server.Config) { cfg.ReleaseBackoffBase, cfg.ReleaseBackoffMax = backoff, backoff },
		ConfigureClient: func(cfg *client.Config) {
			// w1's own unmount at the stop can only fail (its plugin is
			// killed first): ownDetachWindow.
			shortOwnDetach(cfg)
			if cfg.NodeName == "w1" {
				cfg.ProbeInterval = time.Hour
			}
		},
	}, nil, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	back, freed := pluginAwayAndBack(t, e, "v1", "a1", true, 0, backoff)
	t.Logf("freed %s after the plugin came back (backoff %s, probe interval 1 h)", freed.Sub(back).Round(time.Millisecond), backoff)
}

// pluginAwayAndBack runs alloc on w1 with vol, kills w1's node plugin
// (leaving a stale socket file if stale), stops the allocation, waits
// until the release has failed on the missing plugin and scheduled its
// next try past half the backoff, keeps the plugin away for away more,
// and starts it again. It returns when the plugin was back (listening)
// and when the leader freed the claim, which must be before the backoff
// would have retried it.
func pluginAwayAndBack(t *testing.T, e *releaseEnv, vol, alloc string, stale bool, away, backoff time.Duration) (back, freed time.Time) {
	t.Helper()
	e.run(t, alloc, "w1", vol)
	e.waitAlloc(t, alloc, structs.AllocClientRunning)
	p := e.nodes["w1"]
	p.Stop()
	if stale {
		leaveStaleSocket(t, p.Socket)
	}
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), alloc); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if s, ok := st[vol]; !ok || s.Attempts < 1 || time.Until(s.NextTry) < backoff/2 {
			return fmt.Errorf("%s exp: a failed attempt and the next try far away got: %+v", vol, st[vol])
		}
		return nil
	})
	if away > 0 {
		time.Sleep(away) // the plugin's time away is the scenario, not a wait for something
	}
	p.Start()
	back = time.Now()
	// Freed: the claim's free step, stamped by the leader that applied it.
	harness.WaitFor(t, backoff/2, func() error {
		v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), vol, structs.QueryOptions{})
		if err != nil {
			return err
		}
		for _, c := range v.Released {
			if c.AllocID == alloc && c.State == structs.ClaimStateFreed && len(c.Steps) > 0 {
				freed = c.Steps[len(c.Steps)-1].Time
				return nil
			}
		}
		return fmt.Errorf("claim of %s exp: freed got: past %v", alloc, v.PastClaims)
	})
	return back, freed
}

// leaveStaleSocket makes a socket file nobody listens on at path, as a
// plugin killed with SIGKILL leaves behind (connecting is refused).
func leaveStaleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
