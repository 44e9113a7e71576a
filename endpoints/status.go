package endpoints

import (
	"sort"

	"github.com/claimd/claimd/structs"
)

// Status answers liveness and cluster-shape questions. It never forwards:
// each server speaks for itself.
type Status struct{ srv Server }

// Ping answers at once; it proves the RPC path works.
func (s *Status) Ping(args *structs.EmptyArgs, reply *struct{}) error { return nil }

// Leader returns the leader's address as this server knows it ("" if none).
func (s *Status) Leader(args *structs.EmptyArgs, reply *string) error {
	addr, _ := s.srv.Raft().LeaderWithID()
	*reply = string(addr)
	return nil
}

// Peers returns the addresses of the Raft voters as this server knows them.
func (s *Status) Peers(args *structs.EmptyArgs, reply *[]string) error {
	f := s.srv.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return structs.NewError(structs.CodeUnavailable, err.Error())
	}
	var peers []string
	for _, srv := range f.Configuration().Servers {
		peers = append(peers, string(srv.Address))
	}
	sort.Strings(peers)
	*reply = peers
	return nil
}

// Hello exchanges identities between servers for bootstrap-expect.
func (s *Status) Hello(args *structs.HelloRequest, reply *structs.HelloResponse) error {
	*reply = *s.srv.Hello(args)
	return nil
}

// HasNodeConn tells another server whether this one holds a node's session.
func (s *Status) HasNodeConn(args *structs.NodeConnRequest, reply *structs.NodeConnResponse) error {
	*reply = s.srv.NodeRouter().HasConn(args.NodeID)
	return nil
}
