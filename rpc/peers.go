package rpc

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// What one peer may make a server hold across all its sessions (issue 38,
// item 3: a client certificate with no token opened 77 sessions of 1,000
// streams each holding a small unfinished request, and took the leader
// from 236 MB to 2 GB and its leadership; 150 sessions of 1,000 idle
// streams took it to 1.07 GB). Per-session limits alone let a peer
// multiply them by opening sessions, so a peer is counted as a whole.
//
// A peer is a client certificate (its SHA-256 fingerprint) at one remote
// IP address, or, without TLS, a remote IP address. Both together,
// because agents may share one client certificate: a fleet that gives
// every agent the same certificate is one peer per host, not one peer in
// all. A server certificate is exempt from these caps: servers forward
// every call they do not serve themselves, over one session per server,
// and a server certificate is trusted with Raft anyway. Its sessions still
// charge the server's budget.
const (
	// MaxSessionsPerPeer bounds the yamux sessions and plain RPC
	// connections one peer has open on a server at once; past it a new
	// one is refused. The largest legitimate user is one host with one
	// certificate running many clients: `claimd bench -mode claim` opens
	// one session per caller (up to 256 by default) plus its own, and
	// `-mode scale` shares one session per 100 nodes (50 for 5,000
	// nodes, all on one server after two are gone) next to its callers;
	// test clusters run a dozen agents and CLIs on 127.0.0.1 with one
	// client certificate, one session each. 512 leaves room for all of
	// them at once. A session without streams costs about 40 KB (both
	// ends of a plaintext loopback session measured in one process: yamux
	// buffers, three goroutines each side) plus TLS's buffers, so the cap
	// bounds a peer's idle sessions to a few tens of MB.
	MaxSessionsPerPeer = 512

	// MaxStreamsPerPeer bounds the streams a server serves at once for one
	// peer, over all its sessions; past it a new stream is refused. A
	// served stream costs a parked goroutine, its yamux state and its
	// codec (7.6 KB idle, both ends of a loopback session measured in one
	// process) even when it holds no request, so this is what bounds idle
	// streams: about 8 MB a peer. One busy MuxClient never opens more
	// than maxOpenStreams (768); 1024 leaves room for it and a host's
	// other clients (bench callers and agents hold one or a few each).
	// 2048 measured 50-60 MB more RSS under issue 38's floods.
	MaxStreamsPerPeer = 1024

	// PeerBudgetBytes bounds the bytes one peer's unfinished requests hold
	// on a server, over all its sessions: two requests of the largest
	// size, as one session may. It is half the server's budget, so one
	// peer can never take the whole of it: calls of other peers go on
	// while one floods.
	PeerBudgetBytes = 2 * MaxRequestBytes
)

// PeerKey names the peer of a connection from remote (host:port) with the
// leaf certificate fingerprint cert ("" without TLS): the certificate at
// the IP address, or the IP address alone.
func PeerKey(remote, cert string) string {
	ip := remote
	if host, _, err := net.SplitHostPort(remote); err == nil {
		ip = host
	}
	if cert == "" {
		return "address " + ip
	}
	// 16 hex digits name a certificate well enough for a log line and a
	// map key among a cluster's certificates.
	if len(cert) > 16 {
		cert = cert[:16]
	}
	return "certificate " + cert + " at " + ip
}

// Peers counts what every peer holds on one server.
type Peers struct {
	server      *Budget
	maxSessions int
	maxStreams  int64
	budgetBytes int64

	mu    sync.Mutex
	peers map[string]*Peer
}

// NewPeers tracks peers whose budgets are charged to server too, with the
// default caps.
func NewPeers(server *Budget) *Peers {
	return NewPeersWith(server, MaxSessionsPerPeer, MaxStreamsPerPeer, PeerBudgetBytes)
}

// NewPeersWith is NewPeers with other caps (for tests).
func NewPeersWith(server *Budget, maxSessions, maxStreams int, budget int64) *Peers {
	return &Peers{server: server, maxSessions: maxSessions, maxStreams: int64(maxStreams), budgetBytes: budget, peers: map[string]*Peer{}}
}

// Peer is one peer's share of a server: its open sessions, its streams
// and its budget. It lives while the peer has a session open.
type Peer struct {
	key    string
	peers  *Peers
	budget *Budget

	sessions int          // under peers.mu
	streams  atomic.Int64 // streams served now, over all sessions
	// draining: refused or finished streams still open because the peer
	// has not closed them yet (each holds a goroutine).
	draining atomic.Int64
}

// Open counts a new session (or plain connection) of the peer named key.
// Past MaxSessionsPerPeer it returns an unavailable error naming the
// limit, and nothing is counted; else the caller must call Close when
// the session ends.
func (p *Peers) Open(key string) (*Peer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pe := p.peers[key]
	if pe == nil {
		pe = &Peer{key: key, peers: p, budget: NewBudget("peer", p.budgetBytes, p.server)}
		p.peers[key] = pe
	}
	if pe.sessions >= p.maxSessions {
		return nil, fmt.Errorf("session refused: %s has %d sessions open on this server, the limit (rpc.MaxSessionsPerPeer); retry later", key, pe.sessions)
	}
	pe.sessions++
	return pe, nil
}

// Close ends one session of the peer; the peer is forgotten with its last.
func (pe *Peer) Close() {
	p := pe.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	if pe.sessions--; pe.sessions == 0 && p.peers[pe.key] == pe {
		delete(p.peers, pe.key)
	}
}

// Key names the peer (PeerKey).
func (pe *Peer) Key() string { return pe.key }

// Budget is the peer's budget, charged to the server's too. Its sessions'
// budgets are charged to it.
func (pe *Peer) Budget() *Budget { return pe.budget }

// Sessions is how many sessions the peer has open (for tests).
func (p *Peers) Sessions(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pe := p.peers[key]; pe != nil {
		return pe.sessions
	}
	return 0
}

// takeStream counts a stream to serve, or says why not.
func (pe *Peer) takeStream() string {
	if n := pe.streams.Add(1); n > pe.peers.maxStreams {
		pe.streams.Add(-1)
		return fmt.Sprintf("stream refused: %s has %d streams open on this server, the limit (rpc.MaxStreamsPerPeer); retry later", pe.key, pe.peers.maxStreams)
	}
	return ""
}

func (pe *Peer) giveStream() { pe.streams.Add(-1) }
