package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/forward"
	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/internal/netutil"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/snapshot"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Snapshot save and restore (`claimd operator snapshot`) run over their
// own stream (rpc.ProtoSnapshot; the protocol is in package snapshot):
// an archive can be far larger than one RPC request may be. The leader
// serves both; any other server passes the stream on to the leader
// unchanged, so both work through any server, like forwarded RPCs. A stale
// save (AllowStale) is served by the server it reaches, from its own
// state.
//
// An archive holds every secret (volume secrets, node secrets, ACL
// tokens), so both need a management token (or ACLs off).

const (
	// snapshotRequestTimeout bounds the wait for the request frame.
	snapshotRequestTimeout = 10 * time.Second
	// snapshotIdleTimeout bounds each read and write while an archive
	// moves: a peer that stops sending or reading for this long is dropped.
	snapshotIdleTimeout = time.Minute
	// snapshotRestoreTimeout bounds the wait for Raft to take a restore in
	// (not the restore itself).
	snapshotRestoreTimeout = time.Minute
)

// serveSnapshot serves one snapshot stream, after its protocol byte.
func (s *Server) serveSnapshot(conn net.Conn, info endpoints.ConnInfo) {
	if !s.track(conn) {
		return
	}
	defer s.untrack(conn)
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(snapshotRequestTimeout))
	var req snapshot.Request
	if err := snapshot.ReadFrame(conn, &req); err != nil {
		s.logger.Warn("snapshot stream closed: no request", "remote", info.Remote, "error", err)
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	c := &netutil.IdleConn{Conn: conn, ReadTimeout: snapshotIdleTimeout, WriteTimeout: snapshotIdleTimeout}
	method := "Snapshot.Save"
	switch req.Op {
	case snapshot.OpSave:
	case snapshot.OpRestore:
		method = "Snapshot.Restore"
	default:
		respondSnapshot(c, structs.Invalid("op", fmt.Sprintf("%q is neither %q nor %q", req.Op, snapshot.OpSave, snapshot.OpRestore)), 0)
		return
	}
	// As for forwarded RPCs: only a server passes a stream on.
	if req.Forwarded && info.TLS && info.Role != tlsutil.RoleServer {
		respondSnapshot(c, s.denySnapshot(method, "a forwarded request must come from a server certificate", info), 0)
		return
	}
	leader, err := s.snapshotLeader(req)
	if err != nil {
		respondSnapshot(c, err, 0)
		return
	}
	if leader != "" {
		s.proxySnapshot(conn, req, leader, info)
		return
	}
	if err := s.authorizeSnapshot(method, req.AuthToken, info); err != nil {
		respondSnapshot(c, err, 0)
		return
	}
	if req.Op == snapshot.OpSave {
		s.snapshotSave(c, req, info)
	} else {
		s.snapshotRestore(c, info)
	}
}

// snapshotLeader says where a request is served: "" here, else the
// leader's address. It holds while there is no leader, as forwarding does.
func (s *Server) snapshotLeader(req snapshot.Request) (string, error) {
	if req.Op == snapshot.OpSave && req.AllowStale {
		return "", nil
	}
	hold := time.NewTimer(forward.HoldTimeout)
	defer hold.Stop()
	for {
		changed := s.LeaderChanged()
		addr, self := s.Leader()
		switch {
		case self:
			return "", nil
		case req.Forwarded:
			return "", structs.NewError(structs.CodeNoLeader, "forwarded to a server that is not the leader")
		case addr != "":
			return addr, nil
		}
		select {
		case <-changed:
		case <-hold.C:
			return "", structs.ErrNoLeader
		case <-s.shutdownCh:
			return "", structs.ErrShutdown
		}
	}
}

// authorizeSnapshot allows a management token, or anyone with ACLs off.
// It resolves the token as endpoints' authz does for management methods
// (a leader whose barrier is pending looks again for a token it does not
// know yet), and a refusal is logged and counted the same way.
func (s *Server) authorizeSnapshot(method, token string, info endpoints.ConnInfo) error {
	if !s.cfg.ACLEnabled {
		return nil
	}
	resolved, err := s.tokens.Resolve(s.fsm.State(), token)
	if err != nil && s.BarrierPending() && s.WaitConsistentReads() == nil {
		resolved, err = s.tokens.Resolve(s.fsm.State(), token)
	}
	if err != nil {
		return s.denySnapshot(method, err.Error(), info)
	}
	if !resolved.ACL.IsManagement() {
		return s.denySnapshot(method, "a management token is required (a snapshot holds every secret)", info)
	}
	return nil
}

// denySnapshot logs and counts a refusal like endpoints' authz.deny; the
// token appears in neither the log nor the error.
func (s *Server) denySnapshot(method, why string, info endpoints.ConnInfo) error {
	s.security.ACLDenied.Add(1)
	s.logger.Warn("permission denied", "method", method, "reason", why, "remote", info.Remote)
	return structs.NewError(structs.CodePermissionDenied, method+": "+why)
}

// proxySnapshot passes a stream on to the leader and pipes both ways until
// either end closes. The leader checks the token and keeps its own
// deadlines, and so does the client: the pipe bounds only its writes (a
// peer that stops reading), never its reads, which may wait for as long
// as the leader takes to restore.
func (s *Server) proxySnapshot(client net.Conn, req snapshot.Request, addr string, info endpoints.ConnInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), rpc.HandshakeTimeout)
	up, err := rpc.DialProtocol(ctx, s.outgoingDialer(), addr, rpc.ProtoSnapshot)
	cancel()
	if err != nil {
		respondSnapshot(client, structs.NewError(structs.CodeNoLeader, fmt.Sprintf("cannot reach the leader at %s: %v", addr, err)), 0)
		return
	}
	defer up.Close()
	req.Forwarded = true
	upw := &netutil.IdleConn{Conn: up, WriteTimeout: snapshotIdleTimeout}
	if err := snapshot.WriteFrame(upw, req); err != nil {
		respondSnapshot(client, structs.NewError(structs.CodeNoLeader, fmt.Sprintf("cannot reach the leader at %s: %v", addr, err)), 0)
		return
	}
	s.logger.Debug("passing a snapshot stream to the leader", "op", req.Op, "remote", info.Remote, "leader", addr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(upw, client)
		up.Close()
		client.Close()
	}()
	_, _ = io.Copy(&netutil.IdleConn{Conn: client, WriteTimeout: snapshotIdleTimeout}, up)
	up.Close()
	client.Close()
	<-done
}

// outgoingDialer dials as every outgoing connection of this server does:
// TLS when TLS is on (built as in New).
func (s *Server) outgoingDialer() rpc.Dialer {
	if s.cfg.TLS != nil {
		return rpc.TLSDialer(s.cfg.Dialer, s.cfg.TLS.OutgoingConfig, s.cfg.TLSAllowPlaintext)
	}
	return s.cfg.Dialer
}

// snapshotSave captures the state and streams it as an archive.
func (s *Server) snapshotSave(c net.Conn, req snapshot.Request, info endpoints.ConnInfo) {
	f, meta, size, err := s.captureState(!req.AllowStale)
	if err != nil {
		s.logger.Warn("snapshot save failed", "remote", info.Remote, "error", err)
		respondSnapshot(c, err, 0)
		return
	}
	defer removeTemp(f)
	if err := snapshot.WriteFrame(c, snapshot.Response{Index: meta.Index}); err != nil {
		return
	}
	cw := snapshot.NewChunkWriter(c)
	ainfo, err := snapshot.Write(cw, meta, f, size)
	if err == nil {
		err = cw.Close()
	} else {
		_ = cw.Close() // the client's check of the archive fails; the response says why
	}
	if err != nil {
		s.logger.Warn("snapshot save failed while sending", "remote", info.Remote, "error", err)
		respondSnapshot(c, structs.NewError(structs.CodeUnavailable, "sending the archive: "+err.Error()), meta.Index)
		return
	}
	respondSnapshot(c, nil, meta.Index)
	s.logger.Info("snapshot saved", "remote", info.Remote, "index", meta.Index, "state_bytes", size,
		"state_sha256", ainfo.StateSHA256)
}

// captureState writes the state to a temporary file (an archive's tar
// header needs its size first) and describes it. consistent: after a
// Barrier, so that it holds everything committed before the save began.
// The Index is the state's own newest write, read from the same frozen
// view as the bytes.
func (s *Server) captureState(consistent bool) (*os.File, snapshot.Meta, int64, error) {
	var meta snapshot.Meta
	if consistent {
		if err := s.barrier(); err != nil {
			return nil, meta, 0, err
		}
	}
	view := s.fsm.State().Snapshot()
	f, err := os.CreateTemp(s.cfg.DataDir, "snapshot-save-*.tmp")
	if err != nil {
		return nil, meta, 0, structs.NewError(structs.CodeUnavailable, "snapshot: "+err.Error())
	}
	if err := view.WriteSnapshot(f); err != nil {
		removeTemp(f)
		return nil, meta, 0, structs.NewError(structs.CodeUnavailable, "snapshot: "+err.Error())
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		removeTemp(f)
		return nil, meta, 0, structs.NewError(structs.CodeUnavailable, "snapshot: "+err.Error())
	}
	meta = snapshot.Meta{ClaimdVersion: snapshot.ClaimdVersion(), Index: view.LatestIndex(),
		Term: s.raft.Raft.CurrentTerm(), Time: time.Now().UTC(), Server: s.cfg.NodeName, ServerID: s.id}
	return f, meta, size, nil
}

// barrier waits until this leader has applied every entry committed
// before it was called.
func (s *Server) barrier() error {
	f := s.raft.Raft.Barrier(barrierTimeout)
	res := make(chan error, 1)
	go func() { res <- f.Error() }()
	select {
	case err := <-res:
		return endpoints.RaftError(err)
	case <-s.shutdownCh:
		return structs.ErrShutdown
	}
}

// snapshotRestore receives an archive and restores it.
func (s *Server) snapshotRestore(c net.Conn, info endpoints.ConnInfo) {
	if err := snapshot.WriteFrame(c, snapshot.Response{}); err != nil {
		return
	}
	index, err := s.restoreArchive(snapshot.NewChunkReader(c))
	if err != nil {
		s.logger.Warn("snapshot restore refused", "remote", info.Remote, "error", err)
	} else {
		s.logger.Info("snapshot restored: the cluster's state was replaced", "remote", info.Remote, "index", index)
	}
	respondSnapshot(c, err, index)
}

// restoreArchive verifies an archive completely, then restores its state
// through Raft: the leader takes it in and every follower is sent it
// (raft's user restore), so every server converges. Nothing reaches Raft
// before the whole archive was read and checked and its state was loaded
// aside: raft panics when a state it has taken in fails to load.
func (s *Server) restoreArchive(archive io.Reader) (uint64, error) {
	f, err := os.CreateTemp(s.cfg.DataDir, "snapshot-restore-*.tmp")
	if err != nil {
		return 0, structs.NewError(structs.CodeUnavailable, "restore: "+err.Error())
	}
	defer removeTemp(f)
	info, err := snapshot.Read(archive, f)
	if err != nil {
		// Take the rest of what the client sends before answering: a
		// connection closed with unread data is reset, and the client
		// could lose the answer that says why.
		_, _ = io.Copy(io.Discard, io.LimitReader(archive, snapshot.MaxStateBytes))
		return 0, structs.NewError(structs.CodeInvalid, "snapshot refused, nothing was changed: "+err.Error())
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, structs.NewError(structs.CodeUnavailable, "restore: "+err.Error())
	}
	aside := fsm.New(nil)
	if err := aside.Restore(io.NopCloser(f)); err != nil {
		return 0, structs.NewError(structs.CodeInvalid, "snapshot refused, nothing was changed: "+
			"its state matches its checksum but does not load: "+err.Error())
	}
	// Raft continues after max(its last index, this)+1: every index in
	// the restored state stays below the entries that follow it, which
	// blocking queries and the release watcher rely on.
	index := max(info.Meta.Index, aside.State().LatestIndex())
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, structs.NewError(structs.CodeUnavailable, "restore: "+err.Error())
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: index, Term: info.Meta.Term, Size: info.StateSize}
	if err := s.raft.Raft.Restore(meta, f, snapshotRestoreTimeout); err != nil {
		return 0, structs.Wrap(endpoints.RaftError(err), "restore")
	}
	s.restartHeartbeats()
	s.ensureServerTokenAfterRestore()
	return s.raft.Raft.AppliedIndex(), nil
}

// ensureServerTokenAfterRestore makes a server token when the restored
// state has none (an archive from a cluster without ACLs), as a new leader
// does: servers need one for their own calls. Bounded: if this server
// stops leading, the next leader makes it at its election.
func (s *Server) ensureServerTokenAfterRestore() {
	if !s.cfg.ACLEnabled || s.fsm.State().ServerToken() != nil {
		return
	}
	stop := make(chan struct{})
	t := time.AfterFunc(10*time.Second, func() { close(stop) })
	defer t.Stop()
	s.ensureServerToken(stop)
}

// restartHeartbeats gives every ready node of a restored state a full TTL
// to heartbeat to this leader. A restore into another cluster brings nodes
// that this leader has no timer for; without one, a node that never comes
// back would stay ready for good. (The release watcher needs nothing: it
// reads a restored state's pending evals from the start.)
func (s *Server) restartHeartbeats() {
	nodes, err := s.fsm.State().Nodes(nil)
	if err != nil {
		s.logger.Error("reading the restored nodes", "error", err)
		return
	}
	for _, n := range nodes {
		if n.Status == structs.NodeStatusReady {
			s.beats.Reset(n.ID)
		}
	}
}

func respondSnapshot(w io.Writer, err error, index uint64) {
	_ = snapshot.WriteFrame(w, snapshot.ResponseFor(err, index))
}

func removeTemp(f *os.File) {
	f.Close()
	_ = os.Remove(f.Name())
}
