package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
)

// A release that failed because the node plugin was away goes on when the
// plugin is back (the node registers again with its health changed), not
// when its backoff runs out (issue 41): with a 60 s backoff the claim is
// freed well within it. The margin is the mechanism's, not a speed
// target: a timer-driven retry would take the whole minute.
func TestRelease_PluginBackRetriesAtOnceNotOnTheBackoff(t *testing.T) {
	const backoff = 60 * time.Second
	// w1's own unmount at the stop can only fail (its plugin is gone):
	// ownDetachWindow.
	e := newReleaseEnvOpts(t, harness.Options{Configure: func(cfg *server.Config) {
		cfg.ReleaseBackoffBase, cfg.ReleaseBackoffMax = backoff, backoff
	}, ConfigureClient: shortOwnDetach}, nil, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.run(t, "a1", "w1", "v1")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	e.nodes["w1"].Stop()
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "a1"); err != nil {
		t.Fatal(err)
	}
	// The node detach failed and waits out the backoff.
	harness.WaitFor(t, 30*time.Second, func() error {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if s, ok := st["v1"]; !ok || s.Attempts < 1 || time.Until(s.NextTry) < backoff/2 {
			return fmt.Errorf("v1 exp: a failed attempt and the next try far away got: %+v", st["v1"])
		}
		return nil
	})
	back := time.Now()
	e.nodes["w1"].Start()
	e.waitFreed(t, "v1", backoff/2)
	t.Logf("freed %s after the plugin came back (backoff %s)", time.Since(back).Round(time.Millisecond), backoff)
}
