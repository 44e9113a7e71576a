package rpc

import (
	"context"
	"fmt"
	"net"
	netrpc "net/rpc"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/structs"
)

// What one peer can make a server hold while it sends requests (issue 24,
// item 4: 60 streams on one session, each holding a partly sent request of
// nearly MaxRequestBytes, took a server from 29 MB to 1.3 GB and cost it
// its leadership). docs/security.md lists them.
const (
	// MaxStreamsPerSession bounds the streams a server serves at once on
	// one yamux session; past it a new stream is closed at once. A
	// legitimate session holds at most its callers' concurrent calls plus
	// the idle streams MuxClient keeps (maxIdleStreams, 512): a follower
	// forwards a few hundred calls at once, claimd bench runs 64-256
	// callers. 1024 leaves room for both, and MuxClient itself never opens
	// more than maxOpenStreams, so a legitimate client waits instead of
	// being refused.
	MaxStreamsPerSession = 1024

	// SessionBudgetBytes bounds the bytes held in unfinished requests on
	// one session: two requests of the largest size at once. A follower
	// forwards many calls over one session, almost all of them a few
	// hundred bytes; two batch registrations of the largest size may be
	// read at once, a third waits for budget. A session of a peer that is
	// not a server is charged to its peer's budget (PeerBudgetBytes) too.
	SessionBudgetBytes = 2 * MaxRequestBytes

	// ServerBudgetBytes bounds the bytes held in unfinished requests on
	// the whole server, all sessions and plain connections together: four
	// requests of the largest size. It is what keeps a flood spread over
	// many sessions and peers within the server's memory. A held byte
	// costs about two in RSS (the Go heap grows to twice what is live
	// before it collects), so 32 MiB keeps a flood's cost near 100 MB
	// where 64 MiB measured 220 MB above idle (the flood test allows 200
	// MB). Every byte is charged, from a request's first (issue 38: an
	// uncharged 4 KiB per request let 77,000 small unfinished requests
	// hold 2 GB); no single peer can hold more than half of it
	// (PeerBudgetBytes), so the calls of other peers go on while one
	// floods.
	ServerBudgetBytes = 4 * MaxRequestBytes

	// RequestReadTimeout bounds the read of one request from its first
	// byte to its last. A legitimate request is written in one go; the
	// largest (MaxRequestBytes) takes well under a second on any link a
	// cluster runs on, and 20 s is still far above that on a loaded
	// machine. Idle streams between requests have no deadline: clients
	// keep them pooled.
	RequestReadTimeout = 20 * time.Second

	// maxOpenStreams is how many streams a MuxClient keeps open at once
	// (in use or idle). It stays below MaxStreamsPerSession by a margin
	// for streams the client has closed that the server has not finished
	// with yet, so that a legitimate client never meets the server's cap:
	// its callers past the bound wait for a stream instead.
	maxOpenStreams = MaxStreamsPerSession - 256
)

// Budget is an allowance of bytes held by unfinished requests, shared by
// every reader charged to it (a session's streams) and, through its parent,
// with other budgets (every session on a server). Bytes are charged as a
// request's buffer grows and released when the request is fully read or
// fails; a charge that does not fit is refused, never waited for.
type Budget struct {
	name   string
	limit  int64
	used   atomic.Int64
	parent *Budget
}

// NewBudget makes a budget of limit bytes named for errors ("session",
// "server"); charges to it are charged to parent too (nil: none).
func NewBudget(name string, limit int64, parent *Budget) *Budget {
	return &Budget{name: name, limit: limit, parent: parent}
}

// Used is the bytes charged now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Limit is the bytes the budget allows.
func (b *Budget) Limit() int64 { return b.limit }

// Name says which budget this is ("session", "server").
func (b *Budget) Name() string { return b.name }

// take charges n bytes to b and its parents, all or none. On refusal it
// returns the budget that had no room.
func (b *Budget) take(n int64) *Budget {
	for x := b; x != nil; x = x.parent {
		if !x.tryTake(n) {
			for y := b; y != x; y = y.parent {
				y.used.Add(-n)
			}
			return x
		}
	}
	return nil
}

func (x *Budget) tryTake(n int64) bool {
	for {
		u := x.used.Load()
		if u+n > x.limit {
			return false
		}
		if x.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give releases n bytes taken from b.
func (b *Budget) give(n int64) {
	for x := b; x != nil; x = x.parent {
		x.used.Add(-n)
	}
}

// StreamLimits bound the streams of one yamux session.
type StreamLimits struct {
	// PerSession bounds the streams served at once on the session
	// (MaxStreamsPerSession).
	PerSession int
	// Peer, if set, is the session's peer: its streams over all its
	// sessions are bounded too (MaxStreamsPerPeer). nil: a server's
	// session, bounded per session only.
	Peer *Peer
	// Refusal bounds the read of a refused stream's request header, so
	// that the refusal can be its answer (a short deadline, a small size,
	// the peer's budget).
	Refusal RequestLimits
}

// refusalHeaderBytes bounds the request header read from a refused
// stream to answer it: a method name and a sequence number.
const refusalHeaderBytes = 1 << 10

// maxRefusedPerSession bounds the refused streams a session may keep open
// (answered, closed by the server, not yet by the peer); one more and the
// session is closed. Every refused stream costs the server a goroutine
// and the CPU to answer it, and a peer can open them as fast as it can
// write: issue 38's flood opened 77,000, and answering each took the
// leader's CPU from Raft (elections). A client that meets a limit closes
// the refused stream when it reads the answer (MuxClient does), so it
// never keeps many; a peer that keeps opening streams past a limit
// without closing them is not a client.
const maxRefusedPerSession = 32

// RefusalReadTimeout bounds how long a refused stream's request header
// may take to arrive before the stream is closed unanswered.
const RefusalReadTimeout = 2 * time.Second

// ServeStreams accepts the streams of a yamux session and runs serve on
// each in its own goroutine, at most lim.PerSession at once on the session
// and, with lim.Peer, at most MaxStreamsPerPeer at once over the peer's
// sessions. A stream past either is refused: its request header is read
// (within RefusalReadTimeout, charged to the budget) and answered with an
// unavailable error naming the limit, and the stream is closed; refused
// is told why. A stream is held from its accept until its peer has closed
// it too: after serve returns, what the peer still sends is read and
// discarded (drain), so that bytes a peer pushes into a stream the server
// has given up on are never buffered. A peer that leaves more than
// 2*lim.PerSession streams open on the session, more than
// maxRefusedPerSession refused streams open on it, or more than
// MaxStreamsPerPeer refused streams open over its sessions, loses the
// session. ServeStreams returns when the session ends.
func ServeStreams(sess *yamux.Session, lim StreamLimits, serve func(net.Conn), refused func(why string)) {
	var held, refusedOpen atomic.Int64
	pe := lim.Peer
	g := guardOf(sess)
	if g == nil {
		g = newStreamGuard()
	}
	defer guards.Delete(sess)
	closeSession := func() {
		g.wakeAll()
		sess.Close()
	}
	for {
		ys, err := sess.AcceptStream()
		if err != nil {
			g.wakeAll()
			return
		}
		stream := g.guard(ys)
		// NumStreams counts every stream the session knows: served,
		// draining, refused but not closed by the peer, and not accepted
		// yet. Each may buffer up to yamux's receive window.
		if n := sess.NumStreams(); n > 2*lim.PerSession {
			refused(fmt.Sprintf("session closed: the peer keeps %d streams open, more than twice the limit of %d per session", n, lim.PerSession))
			closeSession()
			return
		}
		// Refused streams cost a goroutine each until their peer closes
		// them: a peer that keeps them open over many sessions loses the
		// session that opens one more.
		if pe != nil && pe.draining.Load() >= pe.peers.maxStreams {
			refused(fmt.Sprintf("session closed: %s keeps %d refused streams open, the limit (rpc.MaxStreamsPerPeer)", pe.key, pe.draining.Load()))
			closeSession()
			return
		}
		why := ""
		if held.Load() >= int64(lim.PerSession) {
			why = fmt.Sprintf("stream refused: %d streams are open on this session, the limit (rpc.MaxStreamsPerSession); retry later", lim.PerSession)
		} else if pe != nil {
			why = pe.takeStream()
		}
		if why != "" {
			if refusedOpen.Load() >= maxRefusedPerSession {
				refused(fmt.Sprintf("session closed: the peer keeps %d refused streams open on it and opens more (%s)", maxRefusedPerSession, why))
				closeSession()
				return
			}
			refused(why)
			refusedOpen.Add(1)
			if pe != nil {
				pe.draining.Add(1)
			}
			go func() {
				AnswerRefusal(stream, lim.Refusal, why)
				drain(stream)
				g.release(stream)
				refusedOpen.Add(-1)
				if pe != nil {
					pe.draining.Add(-1)
				}
			}()
			continue
		}
		held.Add(1)
		go func() {
			serve(stream)
			drain(stream)
			g.release(stream)
			held.Add(-1)
			if pe != nil {
				pe.giveStream()
			}
		}()
	}
}

// AnswerRefusal reads a refused stream's (or plain connection's) request
// header, if it comes within lim.ReadTimeout (at most RefusalReadTimeout)
// and fits in refusalHeaderBytes, and answers it with why (unavailable).
// The caller then closes the stream: a client must open another (or
// wait).
func AnswerRefusal(stream net.Conn, lim RequestLimits, why string) {
	lim.MaxBytes = refusalHeaderBytes
	if lim.ReadTimeout <= 0 || lim.ReadTimeout > RefusalReadTimeout {
		lim.ReadTimeout = RefusalReadTimeout
	}
	lim.Refused = nil
	c := NewLimitedServerCodec(stream, lim).(*limitedServerCodec)
	// The deadline runs from the stream's accept: an idle refused stream
	// is not answered.
	_ = stream.SetReadDeadline(time.Now().Add(lim.ReadTimeout))
	var req netrpc.Request
	err := c.ReadRequestHeader(&req)
	c.fr.finish(true)
	if err != nil {
		return
	}
	_ = stream.SetWriteDeadline(time.Now().Add(lim.ReadTimeout))
	_ = c.WriteResponse(&netrpc.Response{ServiceMethod: req.ServiceMethod, Seq: req.Seq,
		Error: structs.NewError(structs.CodeUnavailable, why+streamEndNote).Error()}, struct{}{})
}

// drain closes a stream and reads what its peer still sends until the
// peer closes it too (or yamux gives up on it after StreamCloseTimeout,
// or the session ends). Without it, a stream closed on one side keeps
// up to its receive window (256 KiB) buffered that nobody reads.
func drain(s *guardedStream) {
	s.Close()
	var buf [4096]byte
	for !s.Session().IsClosed() {
		_, err := s.Read(buf[:])
		// Let go of yamux's receive buffer once it is empty: a drained
		// stream holds nothing.
		s.Shrink()
		if err != nil {
			return
		}
	}
}

// RefuseSession answers the requests of a session the server will not
// serve (a peer past MaxSessionsPerPeer) with why, as unavailable errors,
// for RefusalReadTimeout, then closes the session: a client learns which
// limit it met instead of seeing its connection drop. lim bounds each
// request header read (its budget, normally the server's).
func RefuseSession(sess *yamux.Session, lim RequestLimits, why string) {
	defer guards.Delete(sess)
	defer sess.Close()
	deadline := time.Now().Add(RefusalReadTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for {
		stream, err := sess.AcceptStreamWithContext(ctx)
		if err != nil {
			return
		}
		lim.ReadTimeout = time.Until(deadline)
		if lim.ReadTimeout > 0 {
			AnswerRefusal(stream, lim, why)
		}
		stream.Close()
	}
}
