package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/claimd/claimd/internal/netutil"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/snapshot"
	"github.com/claimd/claimd/structs"
)

// Snapshots travel on their own stream (rpc.ProtoSnapshot), not as RPC
// calls: an archive can be larger than one request may be. Any server
// answers; one that does not lead passes the stream on to the leader.
// Both need a management token (the archive holds every secret).

// SnapshotOptions tune SnapshotSave and SnapshotRestore.
type SnapshotOptions struct {
	// AllowStale (save only): the contacted server saves its own state,
	// which may lag the leader's (works without a leader).
	AllowStale bool
	// Token, when set, is sent instead of the client's token (the HTTP API
	// passes its caller's).
	Token string
}

// SnapshotSave writes an archive of the cluster's whole state, taken by
// the leader after a barrier, to w. The archive is verified as it arrives
// (snapshot.Read): on an error, what was written to w must be thrown away.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer, opts SnapshotOptions) (*snapshot.Meta, error) {
	st, err := c.openSnapshot(ctx, snapshot.Request{Op: snapshot.OpSave, AllowStale: opts.AllowStale, AuthToken: opts.Token})
	if err != nil {
		return nil, err
	}
	defer st.close()

	// Check the archive while it is written to w, so that a stream cut
	// short or damaged on the way is an error here, not at restore time.
	pr, pw := io.Pipe()
	type checked struct {
		info *snapshot.Info
		err  error
	}
	verdict := make(chan checked, 1)
	go func() {
		info, err := snapshot.Read(pr, io.Discard)
		pr.CloseWithError(err) // a failed check stops the copy below
		verdict <- checked{info, err}
	}()
	_, copyErr := io.Copy(io.MultiWriter(w, pw), snapshot.NewChunkReader(st.conn))
	pw.CloseWithError(copyErr)
	v := <-verdict
	if copyErr != nil {
		if v.err != nil && errors.Is(copyErr, v.err) {
			return nil, fmt.Errorf("snapshot save: the archive received is not valid: %w", v.err)
		}
		return nil, st.fail(fmt.Errorf("snapshot save: %w", copyErr))
	}
	// The archive ended with its end marker: the server's last word
	// follows (an error if it failed midway).
	var final snapshot.Response
	if err := snapshot.ReadFrame(st.conn, &final); err != nil {
		return nil, st.fail(fmt.Errorf("snapshot save: %w", err))
	}
	if err := final.Err(); err != nil {
		return nil, err
	}
	if v.err != nil {
		return nil, fmt.Errorf("snapshot save: the archive received is not valid: %w", v.err)
	}
	return &v.info.Meta, nil
}

// SnapshotRestore sends an archive (read from r to its end) to the
// cluster, which verifies all of it before anything changes and then
// replaces its whole state with the archive's through Raft. ACL tokens are
// part of the state: after a restore only the archive's tokens are valid.
func (c *Client) SnapshotRestore(ctx context.Context, r io.Reader, opts SnapshotOptions) error {
	st, err := c.openSnapshot(ctx, snapshot.Request{Op: snapshot.OpRestore, AuthToken: opts.Token})
	if err != nil {
		return err
	}
	defer st.close()
	cw := snapshot.NewChunkWriter(st.conn)
	_, sendErr := io.Copy(cw, r)
	if sendErr == nil {
		sendErr = cw.Close()
	}
	// A server that refused midway says why before it closes: read its
	// answer even when sending failed.
	var final snapshot.Response
	if err := snapshot.ReadFrame(st.conn, &final); err != nil {
		if sendErr != nil {
			return st.fail(fmt.Errorf("snapshot restore: sending the archive: %w", sendErr))
		}
		return st.fail(fmt.Errorf("snapshot restore: %w", err))
	}
	return final.Err()
}

// snapshotStream is one open snapshot stream.
type snapshotStream struct {
	ctx  context.Context
	conn net.Conn
	stop func() bool // stops closing conn at the context's end
}

func (s *snapshotStream) close() {
	s.stop()
	s.conn.Close()
}

// fail says when an error came from the context's end (which closes the
// stream under any read or write).
func (s *snapshotStream) fail(err error) error {
	if ctxErr := s.ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: %w", structs.NewError(structs.CodeTimeout, ctxErr.Error()), err)
	}
	return err
}

// openSnapshot dials a server for a snapshot stream, sends the request
// and reads the go-ahead. A refusal for want of a leader is retried like
// a call's (nothing has moved yet); a server that cannot be reached is
// passed over for the next.
func (c *Client) openSnapshot(ctx context.Context, req snapshot.Request) (*snapshotStream, error) {
	if req.AuthToken == "" {
		req.AuthToken = c.cfg.Token
	}
	if req.AuthToken == "" && c.cfg.TokenFunc != nil {
		req.AuthToken = c.cfg.TokenFunc()
	}
	var st *snapshotStream
	err := c.retry(ctx, func() (err error) {
		st, err = c.openSnapshotOnce(ctx, req)
		return err
	}, func(err error) bool {
		return errors.Is(err, structs.ErrNoLeader)
	})
	return st, err
}

func (c *Client) openSnapshotOnce(ctx context.Context, req snapshot.Request) (*snapshotStream, error) {
	c.mu.Lock()
	first := c.next
	c.mu.Unlock()
	var lastErr error
	for i := range c.cfg.Addresses {
		addr := c.cfg.Addresses[(first+i)%len(c.cfg.Addresses)]
		raw, err := rpc.DialProtocol(ctx, c.cfg.Dialer, addr, rpc.ProtoSnapshot)
		if err != nil {
			lastErr = err
			continue
		}
		// Each read and write is bounded by the client's timeout (a server
		// gone silent), the whole stream by the context.
		st := &snapshotStream{ctx: ctx, conn: netutil.Idle(raw, c.cfg.Timeout)}
		st.stop = context.AfterFunc(ctx, func() { raw.Close() })
		var resp snapshot.Response
		err = snapshot.WriteFrame(st.conn, req)
		if err == nil {
			err = snapshot.ReadFrame(st.conn, &resp)
		}
		if err != nil {
			st.close()
			lastErr = st.fail(fmt.Errorf("snapshot stream to %s: %w", addr, err))
			continue
		}
		if err := resp.Err(); err != nil {
			st.close()
			return nil, err
		}
		return st, nil
	}
	return nil, lastErr
}
