package endpoints

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/structs"
)

// Limits on new nodes admitted by a client certificate alone (ACLs on, no
// token that grants node:write), issue 38: a client certificate registered
// 150 nodes with maximal fingerprints in 3 s (+280 MB on the leader, every
// Raft directory 65 -> 129 MB, 9,600 plugins only a management token could
// remove). Each certificate (the SHA-256 of its leaf, as the entry server
// saw it: structs.CallOrigin.PeerCert) gets a token bucket of new nodes,
// and at most maxNodesPerCert registered nodes at once. A node remembers
// the certificate that admitted it (structs.Node.RegisteredCert, in the
// replicated state), so the cap holds across leaders; the bucket is the
// leader's own and starts full on a new leader, which is at most one burst.
//
// Re-registering a node that exists (with its own secret) is never
// limited, nor is a new node registered with a token that grants
// node:write (the scale run's simulated nodes, test clusters without TLS).
const (
	// newNodeBurst new nodes at once per certificate, then newNodeRate a
	// second: the docs deploy one client certificate to every worker, so a
	// fleet's cold start goes through one bucket (1,000 workers register in
	// about eight minutes; their agents retry with backoff meanwhile).
	newNodeBurst = 32
	newNodeRate  = 2.0
	// maxNodesPerCert nodes admitted by one certificate may be registered
	// at once: with fingerprints of at most 16 KiB (structs.Node.ValidateSize)
	// that is 16 MiB of state at most. A larger fleet registers its nodes
	// with a node:write token (-acl-token) or one certificate per group.
	maxNodesPerCert = 1024
	// admittedTTL: a node admitted but not yet in this server's state is
	// counted against its certificate's cap this long (its entry is on its
	// way, or failed).
	admittedTTL = time.Minute
)

// registerLimits are the bounds a registerLimiter enforces (zero: the
// defaults).
type registerLimits struct {
	burst   int
	perSec  float64
	perCert int
}

func (l registerLimits) orDefaults() registerLimits {
	if l.burst <= 0 {
		l.burst = newNodeBurst
	}
	if l.perSec <= 0 {
		l.perSec = newNodeRate
	}
	if l.perCert <= 0 {
		l.perCert = maxNodesPerCert
	}
	return l
}

// registerLimiter is a server's per-certificate buckets. The zero value is
// ready with the default limits.
type registerLimiter struct {
	limits registerLimits
	now    func() time.Time // nil: time.Now

	mu      sync.Mutex
	certs   map[string]*certBucket
	lastLog atomic.Int64
}

type certBucket struct {
	tokens float64
	at     time.Time
	// admitted: new nodes let through and not yet seen in the state, by
	// node ID, with when (see admittedTTL).
	admitted map[string]time.Time
}

// limitNewNode is Node.Register's hook on the server that serves the call
// (the leader), after Validate and before the entry: the fingerprint size
// limits for every registration, and for a new node admitted by its client
// certificate alone, the certificate's rate and cap. It sets the node's
// RegisteredCert: the old node's for a re-registration, the certificate
// for a new node it admits, else none (whatever the agent sent is not
// believed).
func (n *Node) limitNewNode(c *caller, args *structs.NodeRegisterRequest) error {
	node := args.Node
	if err := node.ValidateSize(); err != nil {
		return err
	}
	old, err := n.srv.State().NodeByID(nil, node.ID)
	if err != nil {
		return err
	}
	node.RegisteredCert = ""
	if old != nil {
		node.RegisteredCert = old.RegisteredCert
		return nil
	}
	if !admittedByCertOnly(n.srv, c) {
		return nil
	}
	if err := n.srv.Security.registrations.admit(n.srv, c.id.cert, node.ID); err != nil {
		return err
	}
	node.RegisteredCert = c.id.cert
	return nil
}

// admittedByCertOnly: ACLs are on and the caller is neither a server nor
// holds a token that grants node:write, so only its client certificate let
// a new node in (Node.allowRegister).
func admittedByCertOnly(srv *Deps, c *caller) bool {
	if c == nil || c.server || !srv.ACLEnabled() || !clientCertified(c.id) {
		return false
	}
	return !c.granted()
}

// admit takes one new node from cert's bucket and checks its cap, or says
// when to come back.
func (l *registerLimiter) admit(srv *Deps, cert, nodeID string) error {
	lim := l.limits.orDefaults()
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	l.mu.Lock()
	if l.certs == nil {
		l.certs = map[string]*certBucket{}
	}
	b := l.certs[cert]
	if b == nil {
		b = &certBucket{tokens: float64(lim.burst), at: now, admitted: map[string]time.Time{}}
		l.certs[cert] = b
	}
	b.tokens = min(float64(lim.burst), b.tokens+now.Sub(b.at).Seconds()*lim.perSec)
	b.at = now
	if b.tokens < 1 {
		wait := time.Duration((1 - b.tokens) / lim.perSec * float64(time.Second))
		l.mu.Unlock()
		return l.refuse(srv, cert, fmt.Sprintf("this client certificate registered %d new nodes in a burst already (then %.0f a second)", lim.burst, lim.perSec), wait)
	}
	registered := 0
	for _, node := range l.nodesOf(srv, cert) {
		delete(b.admitted, node)
		registered++
	}
	for id, at := range b.admitted {
		if now.Sub(at) > admittedTTL {
			delete(b.admitted, id)
		}
	}
	if registered+len(b.admitted) >= lim.perCert {
		l.mu.Unlock()
		return l.refuse(srv, cert, fmt.Sprintf("this client certificate admitted %d nodes, at most %d may be registered at once; register more nodes with a token that grants node:write",
			registered+len(b.admitted), lim.perCert), time.Minute)
	}
	b.tokens--
	b.admitted[nodeID] = now
	// A certificate idle long enough to have a full bucket again and no
	// node on the way needs no entry: forget the others' (cheap, rare).
	for k, o := range l.certs {
		if k != cert && len(o.admitted) == 0 && o.tokens+now.Sub(o.at).Seconds()*lim.perSec >= float64(lim.burst) {
			delete(l.certs, k)
		}
	}
	l.mu.Unlock()
	return nil
}

// nodesOf lists the nodes in the state that cert admitted. A scan: it runs
// only for new nodes admitted by a certificate alone, at most a few a
// second.
func (l *registerLimiter) nodesOf(srv *Deps, cert string) []string {
	nodes, err := srv.State().Nodes(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range nodes {
		if n.RegisteredCert == cert {
			out = append(out, n.ID)
		}
	}
	return out
}

// refuse counts and logs (at most one line a second) a refused new node
// and returns the caller's answer: unavailable with when to retry, spread
// by up to a second.
func (l *registerLimiter) refuse(srv *Deps, cert, why string, wait time.Duration) error {
	srv.Security.RegistrationsRefused.Add(1)
	metrics.IncrCounter([]string{"rpc", "registration_refused"}, 1)
	if now := time.Now().UnixNano(); now-l.lastLog.Load() > int64(time.Second) {
		l.lastLog.Store(now)
		srv.Logger.Warn("new node refused: "+why+" (further refusals within a second are counted, not logged)",
			"cert_sha256", cert, "refused_total", srv.Security.RegistrationsRefused.Load())
	}
	wait += time.Duration(rand.Int64N(int64(time.Second)))
	return structs.RetryLater("Node.Register: "+why, wait)
}
