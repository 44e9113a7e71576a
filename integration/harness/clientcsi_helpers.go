package harness

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
