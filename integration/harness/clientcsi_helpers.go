package harness

import (
	"fmt"
	"strings"
	"time"
)

// ServerOrder lists every server's address with first's first, then the
// others in slot order: a client agent given this list connects to first.
func (c *Cluster) ServerOrder(first *TestServer) []string {
	out := []string{first.Addr}
	for _, s := range c.Servers {
		if s != first {
			out = append(out, s.Addr)
		}
	}
	return out
}

// NodeConnHolders returns the running servers whose node-connection
// registry holds a live session of nodeID.
func (c *Cluster) NodeConnHolders(nodeID string) []*TestServer {
	var out []*TestServer
	for _, s := range c.Servers {
		srv := s.Server()
		if srv == nil {
			continue
		}
		if _, ok := srv.NodeRouter().Conns().Get(nodeID); ok {
			out = append(out, s)
		}
	}
	return out
}

// WaitForNodeConn polls until exactly one running server holds nodeID's
// session and that server passes accept (nil accepts any), and returns it.
func (c *Cluster) WaitForNodeConn(nodeID string, timeout time.Duration, accept func(*TestServer) error) *TestServer {
	c.t.Helper()
	var holder *TestServer
	WaitFor(c.t, timeout, func() error {
		hs := c.NodeConnHolders(nodeID)
		if len(hs) != 1 {
			names := make([]string, 0, len(hs))
			for _, h := range hs {
				names = append(names, h.Name)
			}
			return fmt.Errorf("servers holding node %s's session exp: exactly one got: [%s]", nodeID, strings.Join(names, " "))
		}
		if accept != nil {
			if err := accept(hs[0]); err != nil {
				return err
			}
		}
		holder = hs[0]
		return nil
	})
	return holder
}
