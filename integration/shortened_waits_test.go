package integration

import (
	"time"

	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/leaderlease"
	"github.com/claimd/claimd/server"
)

// ownDetachWindow is the agents' own-unmount bound (-own-detach-timeout,
// client.Config.OwnDetachTimeout) in tests whose node plugin is away,
// failing or hung when an allocation stops. There the agent's own unmount
// can only fail, and these tests are about what comes after it: the stop
// reported without the volume, the servers' node detach and its retries.
// With the product's 10 s every such test first waited those 10 s out
// (about 100 s of the integration package). 2 s still lets the agent try,
// and retry, before it gives up; each test still waits for the failure
// and for the servers' path as events.
const ownDetachWindow = 2 * time.Second

// shortOwnDetach is a harness.Options.ConfigureClient that sets
// ownDetachWindow.
func shortOwnDetach(cfg *client.Config) { cfg.OwnDetachTimeout = ownDetachWindow }

// shortStorageLease is a harness.Options.Configure for tests that stop
// the leader and then wait for the new leader's first storage call (a
// release's node or controller detach): a new leader makes none until
// structs.LeaseExpiry of its storage lease has passed (decision 46), 12.5
// s with the default 10 s lease. The shortest lease the servers accept
// (leaderlease.Min, 5 s, the one TestStaleLeader_* runs with) makes that
// 7.25 s; these tests check what the new leader does, not how long it
// holds off.
func shortStorageLease(cfg *server.Config) { cfg.StorageLease = leaderlease.Min }
