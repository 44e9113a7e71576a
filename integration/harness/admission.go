package harness

import (
	"errors"
	"fmt"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi"
)

// AdmitControllers admits the controllers tc's agent runs, as an operator
// would after the node registered (issue 38): with ACLs on, a client
// agent's controller receives no controller call until admitted. A test
// that needs a controller calls it after StartClient. With ACLs off the
// servers admit controllers as they register, and this does nothing.
func (tc *TestClient) AdmitControllers() {
	tc.c.t.Helper()
	var ids []string
	seen := map[string]bool{}
	for _, p := range tc.plugins {
		if (p.Type == csi.PluginTypeController || p.Type == csi.PluginTypeMonolith) && !seen[p.ID] {
			seen[p.ID] = true
			ids = append(ids, p.ID)
		}
	}
	tc.c.AdmitNodeControllers(tc.NodeID(), ids...)
}

// AdmitNodeControllers admits the controllers of plugins on nodeID with the
// management token once the node has registered them (it polls: the agent
// registers in the background), through any running server. For agents
// that are not a TestClient. Nothing to do with ACLs off.
func (c *Cluster) AdmitNodeControllers(nodeID string, plugins ...string) {
	c.t.Helper()
	if c.opts.Insecure || len(plugins) == 0 {
		return
	}
	clients := map[*TestServer]*api.Client{}
	done := map[string]bool{}
	WaitFor(c.t, 60*time.Second, func() error {
		var errs []error
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			cl := clients[s]
			if cl == nil {
				cl = s.Client()
				clients[s] = cl
			}
			for _, id := range plugins {
				if done[id] {
					continue
				}
				if _, err := cl.AdmitController(Ctx(c.t, 10*time.Second), id, nodeID); err != nil {
					errs = append(errs, fmt.Errorf("admit %s on %s via %s: %w", id, nodeID, s.Name, err))
					continue
				}
				done[id] = true
			}
			if len(done) == len(plugins) {
				return nil
			}
		}
		if len(errs) == 0 {
			return errors.New("no running server")
		}
		return errors.Join(errs...)
	})
}
