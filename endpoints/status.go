package endpoints

import (
	"os"
	"runtime"
	"sort"

	"github.com/claimd/claimd/structs"
)

// Status answers liveness and cluster-shape questions. It never forwards:
// each server speaks for itself.
type Status struct {
	srv  *Deps
	auth *authz
}

// Ping answers at once; it proves the RPC path works.
func (s *Status) Ping(args *structs.EmptyArgs, reply *struct{}) error {
	_, err := s.auth.check("Status.Ping", args)
	return err
}

// Leader returns the leader's address as this server knows it ("" if none).
func (s *Status) Leader(args *structs.EmptyArgs, reply *string) error {
	if _, err := s.auth.check("Status.Leader", args); err != nil {
		return err
	}
	addr, _ := s.srv.Raft().LeaderWithID()
	*reply = string(addr)
	return nil
}

// Peers returns the addresses of the Raft voters as this server knows them.
func (s *Status) Peers(args *structs.EmptyArgs, reply *[]string) error {
	if _, err := s.auth.check("Status.Peers", args); err != nil {
		return err
	}
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
	if _, err := s.auth.check("Status.Hello", args); err != nil {
		return err
	}
	*reply = *s.srv.Hello(args)
	return nil
}

// HasNodeConn tells another server whether this one holds a node's session.
func (s *Status) HasNodeConn(args *structs.NodeConnRequest, reply *structs.NodeConnResponse) error {
	if _, err := s.auth.check("Status.HasNodeConn", args); err != nil {
		return err
	}
	*reply = s.srv.Sessions.HasConn(args.NodeID)
	return nil
}

// StateDigest hashes this server's state (never forwarded), with the
// index of the state it hashed (fsm.StateStore.Digest).
func (s *Status) StateDigest(args *structs.EmptyArgs, reply *structs.StateDigest) error {
	if _, err := s.auth.check("Status.StateDigest", args); err != nil {
		return err
	}
	d, err := s.srv.State().Digest()
	if err != nil {
		return structs.NewError(structs.CodeUnavailable, "state digest: "+err.Error())
	}
	*reply = *d
	return nil
}

// Runtime reports this server process's goroutines and heap (never
// forwarded).
func (s *Status) Runtime(args *structs.EmptyArgs, reply *structs.RuntimeStats) error {
	if _, err := s.auth.check("Status.Runtime", args); err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	sec := s.srv.Security
	*reply = structs.RuntimeStats{PID: os.Getpid(), Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc,
		ACLDenied: sec.ACLDenied.Load(), TLSHandshakeFails: sec.TLSHandshakeFails.Load(), PlaintextRefused: sec.PlaintextRefused.Load(),
		OpeningRefused: sec.OpeningRefused.Load(), RequestsRefused: sec.RequestsRefused.Load(), StreamsRefused: sec.StreamsRefused.Load(),
		QueriesWaiting: sec.QueriesWaiting.Load(),
		QueriesRefused: sec.QueriesRefused.Load(), RegistrationsRefused: sec.RegistrationsRefused.Load()}
	return nil
}
