package endpoints

import (
	"crypto/subtle"
	"fmt"
	"sync"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Node serves client agents (register, status, alloc updates) and reads.
type Node struct {
	srv  *Deps
	conn ConnInfo
	auth *authz
}

// bindSession records that the node's agent is on this call's session, so
// servers can call the node back over it (with volume secrets, and with
// node detaches whose success frees claims). Only a call that came straight
// from the agent (not forwarded) tells us where the agent is, and only a
// caller that proved the node's own secret may bind, move or replace the
// node's session: no token, however privileged, redirects calls meant for
// a node (decision 37).
func (n *Node) bindSession(nodeID string, forwarded bool) {
	if n.conn.Session != nil && !forwarded && nodeID != "" {
		n.srv.Sessions.Bind(nodeID, n.conn.Session)
	}
}

// Register creates or updates a node and its plugin fingerprints.
func (n *Node) Register(args *structs.NodeRegisterRequest, reply *structs.NodeUpdateResponse) error {
	forwarded := args.IsForwarded()
	// Who may register before what: a caller that may not learns nothing
	// from validation.
	c, done, err := n.auth.gate("Node.Register", args, reply, func(c *caller) error { return n.allowRegister(c, args) })
	if done {
		// The leader accepted the registration, which carries the node's
		// secret (its own, or a new node's first): only now is this
		// session the node's.
		if err == nil && args.Node != nil {
			n.bindSession(args.Node.ID, forwarded)
		}
		return err
	}
	received := time.Now()
	// Printable names and IDs; free text sanitised and cut to size first,
	// so that a plugin's long error message does not refuse the node.
	if err := args.CleanText(); err != nil {
		return err
	}
	if err := args.Node.Validate(); err != nil {
		return err
	}
	if err := n.limitNewNode(c, args); err != nil { // register_limits.go
		return err
	}
	// What the entry server saw of the agent's certificate; kept on the
	// request for the log as before (decided in allowRegister).
	args.ClientCertified = clientCertified(c.id)
	args.AutoAdmit = autoAdmitSource(n.srv, c) // issue 38: plugin_admission.go
	_, index, err := n.srv.Apply(structs.NodeRegisterRequestType, args)
	if err != nil {
		return err
	}
	// The report the registration brought, on the volumes it names
	// (issue 39): before the answer, so that an agent whose report was
	// not recorded sends it again with its next registration.
	if f := args.Node.LastFence; f != nil && len(f.Volumes) > 0 {
		req := &structs.FenceReportRequest{NodeID: args.Node.ID, Report: f}
		if _, index, err = n.srv.Apply(structs.FenceReportRequestType|structs.IgnoreUnknownTypeFlag, req); err != nil {
			return err
		}
	}
	// Bound only once the state machine took the registration: two
	// callers racing for a new ID both pass allowRegister, and the one
	// the state machine refuses must not keep the session (issue 38).
	n.bindSession(args.Node.ID, forwarded)
	if args.Node.Status != structs.NodeStatusDown {
		n.srv.Heartbeats.Received(args.Node.ID, received)
		// A node registers again when it reconnects or its plugins'
		// health changes: a release waiting on it goes on now.
		n.srv.Releases.RetryNode(args.Node.ID)
		// The entry committed in this leader's term after the heartbeat
		// arrived: that is as good as a leadership check for the lease.
		reply.Lease = args.Node.Lease
	}
	reply.Index = index
	reply.HeartbeatTTL = n.srv.HeartbeatTTL()
	reply.Servers = n.srv.ServerAddrs()
	return nil
}

// clientCertified: the call entered on a TLS connection with a client
// certificate. A server certificate is as good: an agent run with -server
// and -client in one process (like -dev) has one certificate.
func clientCertified(id identity) bool {
	return id.tls && (id.role == tlsutil.RoleClient || id.role == tlsutil.RoleServer)
}

// allowRegister: a node that exists re-registers with its own secret, and
// so does a node that was deregistered (its ID stays bound to its secret
// until an operator purges it, issue 38); a new node needs a token that
// grants node:write, or a client certificate (whoever holds one was given
// it to run a client agent). No token lets a caller take an ID that is
// bound to another secret. The certificate is the one the call entered
// the cluster with (its identity), never a forwarding server's.
func (n *Node) allowRegister(c *caller, args *structs.NodeRegisterRequest) error {
	node := args.Node
	if node == nil {
		// No node (Validate refuses it next): only the caller counts.
		node = &structs.Node{}
	}
	old, err := n.srv.State().NodeByID(nil, node.ID)
	if err != nil {
		return err
	}
	if old != nil {
		if subtle.ConstantTimeCompare([]byte(old.SecretID), []byte(node.SecretID)) != 1 {
			return n.auth.deny("Node.Register", fmt.Sprintf("node %q is registered with another secret_id", node.ID))
		}
		return nil
	}
	ident, err := n.srv.State().NodeIdentity(nil, node.ID)
	if err != nil {
		return err
	}
	if ident != nil {
		if !ident.Holds(node.SecretID) {
			return n.auth.deny("Node.Register", fmt.Sprintf("node %q was deregistered and its ID stays reserved for its own secret_id "+
				"(an operator can free it with `claimd node purge %s`)", node.ID, node.ID))
		}
		// The same node coming back: its secret is its credential, as
		// for a registered node.
		return nil
	}
	if c.mayDefer && node.ID != "" {
		// This server may not have applied the node yet: the leader
		// knows whether it is new.
		c.deferred = true
		return nil
	}
	if !n.srv.ACLEnabled() {
		return nil
	}
	if clientCertified(c.id) || c.granted() {
		return nil
	}
	if c.mayDefer && c.tokenUnknown {
		c.deferred = true
		return nil
	}
	return n.auth.deny("Node.Register", "a new node needs a client certificate or a token that grants node:write")
}

// UpdateStatus marks a node ready or down (a heartbeat).
func (n *Node) UpdateStatus(args *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse) error {
	return n.updateStatus(args, reply, arrival{})
}

// arrival is when a heartbeat reached the leader and how its leadership is
// confirmed for the lease. The heartbeats of one batch share the batch's
// arrival and one confirmation, which runs after it (decision 39's order).
type arrival struct {
	// at is the arrival; zero: now, once the call is let in.
	at time.Time
	// confirmed reports a quorum's confirmation of this leader taken after
	// at; nil: one of its own.
	confirmed func() bool
}

// leaderConfirmed asks the batch's shared confirmation, or a quorum for this
// heartbeat alone.
func (a arrival) leaderConfirmed(srv *Deps) bool {
	if a.confirmed != nil {
		return a.confirmed()
	}
	return srv.VerifyLeader() == nil
}

func (n *Node) updateStatus(args *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse, arr arrival) error {
	forwarded := args.IsForwarded()
	c, done, err := n.auth.gate("Node.UpdateStatus", args, reply, n.allowStatus(args))
	if done {
		// The leader took the call; the session is the node's only if
		// the caller proved the node's secret here (provedNode), not if a
		// token allowed it.
		if err == nil && !forwarded && c.provedNode(args.NodeID, nil) {
			n.bindSession(args.NodeID, forwarded)
		}
		return err
	}
	// The lease argument counts from when the leader received the
	// heartbeat: take the time before anything else (decision 39).
	received := time.Now()
	if !arr.at.IsZero() {
		received = arr.at
	}
	if err := structs.ValidateID("node_id", args.NodeID); err != nil {
		return err
	}
	if !args.Status.Valid() {
		return structs.Invalid("status", fmt.Sprintf("%q is not %q or %q", args.Status, structs.NodeStatusReady, structs.NodeStatusDown))
	}
	// A heartbeat that changes nothing is not written: only the timer
	// moves. Nodes heartbeat every few seconds; writing each one to the log
	// would make idle clusters busy.
	node, err := n.srv.State().NodeByID(nil, args.NodeID)
	if err != nil {
		return err
	}
	if node == nil {
		return structs.NotFound("node", args.NodeID)
	}
	if !forwarded && c.provedNode(args.NodeID, node) {
		n.bindSession(args.NodeID, forwarded)
	}
	index := node.ModifyIndex
	if node.Status != args.Status {
		if _, index, err = n.srv.Apply(structs.NodeUpdateStatusRequestType, args); err != nil {
			return err
		}
	}
	if args.Status == structs.NodeStatusReady {
		n.srv.Heartbeats.Received(args.NodeID, received)
		// A lease is renewed only by a leader a quorum confirmed after
		// the heartbeat arrived: a deposed leader that has not noticed
		// yet must not keep a node writing while the new leader's
		// clock runs (decision 39). An unconfirmed leader still
		// answers; the agent keeps its lease as it was.
		if node.Lease > 0 && arr.leaderConfirmed(n.srv) {
			reply.Lease = node.Lease
		}
	}
	reply.Index = index
	reply.HeartbeatTTL = n.srv.HeartbeatTTL()
	reply.Servers = n.srv.ServerAddrs()
	return nil
}

// allowStatus is Node.UpdateStatus's part of the check: the node's own
// secret, or a token that grants node:write, as for any node call; but
// only the node itself may say it is ready. A ready heartbeat keeps the
// node's heartbeat timer and lease running, so a token that could send one
// would keep a dead node "alive" (its claims held, its lease renewed)
// while the node itself is gone; a token may only mark a node down, which
// stops its allocations and leaves their claims to the node's own unmount
// or its lease (issue 38).
func (n *Node) allowStatus(args *structs.NodeUpdateStatusRequest) func(*caller) error {
	base := n.auth.forNode("Node.UpdateStatus", func() (string, bool) { return args.NodeID, true })
	return func(c *caller) error {
		if err := base(c); err != nil || c.deferred {
			return err
		}
		if args.Status == structs.NodeStatusReady && n.srv.ACLEnabled() && c.node != args.NodeID {
			return n.auth.deny("Node.UpdateStatus", fmt.Sprintf(
				"only node %q itself (its node secret) may mark it ready; a token may only mark it down", args.NodeID))
		}
		return nil
	}
}

// UpdateStatusBatch serves the heartbeats a follower gathered from its
// client agents (decision 43). Only a server may send a batch, and each
// heartbeat in it is checked and served as that agent's own forwarded
// call (its token, the origin it entered with, the leader's own rules), so
// a batch allows nothing its items would not; one refused heartbeat fails
// only itself.
func (n *Node) UpdateStatusBatch(args *structs.NodeHeartbeatBatchRequest, reply *structs.NodeHeartbeatBatchResponse) error {
	if _, err := n.auth.check("Node.UpdateStatusBatch", args); err != nil {
		return err
	}
	if len(args.Heartbeats) > structs.MaxHeartbeatBatch {
		return structs.Invalid("heartbeats", fmt.Sprintf("%d in one batch, at most %d", len(args.Heartbeats), structs.MaxHeartbeatBatch))
	}
	arr := arrival{at: time.Now()}
	arr.confirmed = sync.OnceValue(func() bool { return n.srv.VerifyLeader() == nil })
	reply.Results = make([]structs.NodeHeartbeatResult, len(args.Heartbeats))
	// Served in order, except that a heartbeat that changes its node's
	// status (a log entry that waits for its commit) is served on its own
	// goroutine: after many nodes come back at once, those share Raft
	// rounds as single calls would. The usual heartbeat writes nothing and
	// takes microseconds; goroutines for it only cost the idle leader.
	var wg sync.WaitGroup
	for i, beat := range args.Heartbeats {
		if beat != nil && n.changesStatus(beat) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.serveBatchedBeat(i, beat, &reply.Results[i], arr)
			}()
			continue
		}
		n.serveBatchedBeat(i, beat, &reply.Results[i], arr)
	}
	wg.Wait()
	return nil
}

// changesStatus reports whether a heartbeat would change its node's status
// as this server's state has it now (only a guess for scheduling: the
// handler reads the node again).
func (n *Node) changesStatus(beat *structs.NodeUpdateStatusRequest) bool {
	node, err := n.srv.State().NodeByID(nil, beat.NodeID)
	return err == nil && node != nil && node.Status != beat.Status
}

func (n *Node) serveBatchedBeat(i int, beat *structs.NodeUpdateStatusRequest, res *structs.NodeHeartbeatResult, arr arrival) {
	if beat == nil {
		res.Error = structs.Invalid(fmt.Sprintf("heartbeats[%d]", i), "empty").Error()
		return
	}
	// Every item came through a server: it is judged by the origin it
	// entered with, never as this connection's own call.
	beat.SetForwarded(true)
	if err := n.updateStatus(beat, &res.Response, arr); err != nil {
		res.Error = err.Error()
	}
}

// Deregister removes nodes; their allocations become lost.
func (n *Node) Deregister(args *structs.NodeDeregisterRequest, reply *structs.GenericResponse) error {
	_, done, err := n.auth.gate("Node.Deregister", args, reply, nil)
	if done {
		return err
	}
	if len(args.NodeIDs) == 0 {
		return structs.Invalid("node_ids", "at least one node ID is required")
	}
	for i, id := range args.NodeIDs {
		if err := structs.ValidateID(fmt.Sprintf("node_ids[%d]", i), id); err != nil {
			return err
		}
	}
	_, index, err := n.srv.Apply(structs.NodeDeregisterRequestType, args)
	reply.Index = index
	if err == nil {
		for _, id := range args.NodeIDs {
			n.srv.Heartbeats.Remove(id)
		}
	}
	return err
}

// UpdateAlloc records the client statuses of a node's allocations. A
// terminal status turns the allocation's claims into past claims with a
// pending volume-claim-gc eval, in the same entry (seed 2).
func (n *Node) UpdateAlloc(args *structs.AllocClientUpdateRequest, reply *structs.GenericResponse) error {
	// A node reports only its own allocations: with NodeID set the state
	// machine refuses an update for an alloc placed elsewhere.
	c, done, err := n.auth.gate("Node.UpdateAlloc", args, reply, n.auth.forNode("Node.UpdateAlloc", func() (string, bool) { return args.NodeID, true }))
	if done {
		return err
	}
	if len(args.Allocs) == 0 {
		return structs.Invalid("allocs", "at least one update is required")
	}
	for i, u := range args.Allocs {
		if u == nil {
			return structs.Invalid(fmt.Sprintf("allocs[%d]", i), "must not be null")
		}
		if err := structs.ValidateID(fmt.Sprintf("allocs[%d].id", i), u.ID); err != nil {
			return err
		}
		if !u.ClientStatus.Valid() {
			return structs.Invalid(fmt.Sprintf("allocs[%d].client_status", i), fmt.Sprintf("%q is not one of %v", u.ClientStatus, structs.AllocClientStatuses))
		}
		if err := u.ValidateDetached(fmt.Sprintf("allocs[%d].detached_volumes", i)); err != nil {
			return err
		}
	}
	// What a node unmounted only the node itself can say (its secret, not
	// a node:write token); anyone else's list is dropped, and those
	// releases take the servers' node detach (decision 61).
	if args.NodeID == "" || !c.provedNode(args.NodeID, nil) {
		for _, u := range args.Allocs {
			u.DetachedVolumes = nil
		}
	}
	args.CleanText() // a client description is shown to operators
	t := structs.AllocClientUpdateRequestType
	if detachedIn(args) {
		if n.srv.AllServersSupport(structs.FeatureHolderDetached) {
			t = structs.AllocClientUpdateDetachedRequestType
		} else {
			for _, u := range args.Allocs {
				u.DetachedVolumes = nil
			}
		}
	}
	resp, index, err := n.srv.Apply(t, args)
	reply.Index = index
	if r, ok := resp.(*structs.AllocClientUpdateResponse); ok && r.HolderDetached > 0 {
		countHolderDetached(r.HolderDetached)
	}
	return err
}

// Get reads one node (secret ID hidden).
func (n *Node) Get(args *structs.NodeSpecificRequest, reply *structs.NodeResponse) error {
	c, done, err := n.auth.gate("Node.Get", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("id", args.ID); err != nil {
		return err
	}
	return blockingQuery(n.srv, c, "Node.Get", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			node, err := state.NodeByID(ws, args.ID)
			if err != nil {
				return 0, err
			}
			if node == nil {
				reply.Node = nil
				if args.MinQueryIndex > 0 {
					return state.TableIndex(fsm.TableNodes), nil
				}
				return 0, structs.NotFound("node", args.ID)
			}
			reply.Node = node.Sanitize()
			return node.ModifyIndex, nil
		})
}

// List reads all nodes.
func (n *Node) List(args *structs.NodeListRequest, reply *structs.NodeListResponse) error {
	c, done, err := n.auth.gate("Node.List", args, reply, nil)
	if done {
		return err
	}
	return blockingQuery(n.srv, c, "Node.List", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			nodes, err := state.Nodes(ws)
			if err != nil {
				return 0, err
			}
			reply.Nodes = make([]*structs.Node, 0, len(nodes))
			for _, node := range nodes {
				reply.Nodes = append(reply.Nodes, node.Sanitize())
			}
			return state.TableIndex(fsm.TableNodes), nil
		})
}

// detachedIn reports whether any update carries the node's statement.
func detachedIn(args *structs.AllocClientUpdateRequest) bool {
	for _, u := range args.Allocs {
		if u != nil && len(u.DetachedVolumes) > 0 {
			return true
		}
	}
	return false
}
