package endpoints

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/structs"
)

// Operator manages the Raft membership.
type Operator struct {
	srv  *Deps
	auth *authz
}

// membershipTimeout bounds a configuration change at the leader.
const membershipTimeout = 10 * time.Second

// RaftGetConfiguration lists the Raft members. Consistent by default (the
// leader answers); AllowStale answers from this server's view.
func (o *Operator) RaftGetConfiguration(args *structs.GenericRequest, reply *structs.RaftConfigurationResponse) error {
	_, done, err := o.auth.gate("Operator.RaftGetConfiguration", args, reply, nil)
	if done {
		return err
	}
	r := o.srv.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError(err)
	}
	_, leaderID := r.LeaderWithID()
	reply.Index = f.Index()
	reply.Servers = nil
	for _, s := range f.Configuration().Servers {
		reply.Servers = append(reply.Servers, structs.RaftServer{
			ID:      string(s.ID),
			Node:    o.srv.ServerName(string(s.ID)),
			Version: o.srv.ServerVersion(string(s.ID)),
			Address: string(s.Address),
			Leader:  s.ID == leaderID,
			Voter:   s.Suffrage == raft.Voter,
		})
	}
	return nil
}

// RaftRemovePeer removes a server from the configuration by ID or address.
func (o *Operator) RaftRemovePeer(args *structs.RaftPeerRequest, reply *structs.GenericResponse) error {
	_, done, err := o.auth.gate("Operator.RaftRemovePeer", args, reply, nil)
	if done {
		return err
	}
	if args.ID == "" && args.Address == "" {
		return structs.Invalid("id", "give the ID or the address of the server to remove")
	}
	r := o.srv.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError(err)
	}
	for _, s := range f.Configuration().Servers {
		if (args.ID != "" && string(s.ID) == args.ID) || (args.ID == "" && string(s.Address) == args.Address) {
			rf := r.RemoveServer(s.ID, 0, membershipTimeout)
			if err := rf.Error(); err != nil {
				return raftError(err)
			}
			reply.Index = rf.Index()
			o.srv.Logger.Info("removed raft peer", "id", s.ID, "address", s.Address)
			return nil
		}
	}
	if args.ID != "" {
		return structs.NotFound("raft peer", args.ID)
	}
	return structs.NotFound("raft peer with address", args.Address)
}

// RaftJoin adds a server that started after the cluster formed. It is
// idempotent: a server already in the configuration with the same address is
// left alone; one whose address now belongs to a new ID (a server that lost
// its data dir) replaces the old entry.
func (o *Operator) RaftJoin(args *structs.RaftJoinRequest, reply *structs.GenericResponse) error {
	_, done, err := o.auth.gate("Operator.RaftJoin", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("server.id", args.Server.ID); err != nil {
		return err
	}
	if args.Server.Addr == "" {
		return structs.Invalid("server.addr", "must not be empty")
	}
	r := o.srv.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError(err)
	}
	for _, s := range f.Configuration().Servers {
		sameID, sameAddr := string(s.ID) == args.Server.ID, string(s.Address) == args.Server.Addr
		switch {
		case sameID && sameAddr:
			reply.Index = f.Index()
			return nil
		case sameID || sameAddr:
			if err := r.RemoveServer(s.ID, 0, membershipTimeout).Error(); err != nil {
				return raftError(err)
			}
		}
	}
	af := r.AddVoter(raft.ServerID(args.Server.ID), raft.ServerAddress(args.Server.Addr), 0, membershipTimeout)
	if err := af.Error(); err != nil {
		return raftError(err)
	}
	reply.Index = af.Index()
	o.srv.Logger.Info("added raft voter", "id", args.Server.ID, "name", args.Server.Name, "address", args.Server.Addr)
	return nil
}

// TransferLeadership asks the leader to hand over to another voter (the
// one named, or one Raft picks).
func (o *Operator) TransferLeadership(args *structs.TransferLeadershipRequest, reply *structs.GenericResponse) error {
	_, done, err := o.auth.gate("Operator.TransferLeadership", args, reply, nil)
	if done {
		return err
	}
	r := o.srv.Raft()
	var f raft.Future
	if args.ID == "" {
		f = r.LeadershipTransfer()
	} else {
		cf := r.GetConfiguration()
		if err := cf.Error(); err != nil {
			return raftError(err)
		}
		var target *raft.Server
		for _, s := range cf.Configuration().Servers {
			if string(s.ID) == args.ID {
				s := s
				target = &s
			}
		}
		if target == nil {
			return structs.NotFound("raft peer", args.ID)
		}
		f = r.LeadershipTransferToServer(target.ID, target.Address)
	}
	if err := f.Error(); err != nil {
		return raftError(err)
	}
	return nil
}

// raftError maps hashicorp/raft errors to claimd's codes. ErrNotLeader means
// nothing was enqueued, so it is a retryable no_leader; ErrLeadershipLost
// means the outcome is unknown, so it is unavailable and must not be
// retried blindly.
func raftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return structs.NewError(structs.CodeNoLeader, err.Error())
	case errors.Is(err, raft.ErrLeadershipLost):
		return structs.NewError(structs.CodeUnavailable, "leadership lost while committing; the outcome is unknown")
	case errors.Is(err, raft.ErrRaftShutdown):
		return structs.ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return structs.NewError(structs.CodeTimeout, err.Error())
	}
	return structs.NewError(structs.CodeUnavailable, fmt.Sprintf("raft: %v", err))
}

// RaftError is raftError for the server package.
func RaftError(err error) error { return raftError(err) }
