package endpoints

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/acl"
	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Resolved is what a token may do.
type Resolved struct {
	// Token is nil for anonymous requests.
	Token *structs.ACLToken
	ACL   *acl.ACL
}

// TokenResolver turns token secrets into ACLs, caching the result per
// server. The cache is valid for one ACL index (the newest write to tokens
// or policies): any token or policy change, and a snapshot restore, start
// it afresh, so a deleted token or policy stops working at the next call.
// Safe for concurrent use.
type TokenResolver struct {
	mu    sync.Mutex
	index uint64
	state *fsm.StateStore
	cache map[string]*Resolved
	// serverSecret is the server token's secret, valid with the cache.
	serverSecret string
	serverKnown  bool
	now          func() time.Time
}

// maxCachedTokens bounds the cache; past it the cache starts afresh.
// Unknown secrets are never cached, so guessing cannot fill it.
const maxCachedTokens = 4096

// NewTokenResolver makes an empty resolver.
func NewTokenResolver() *TokenResolver {
	return &TokenResolver{cache: map[string]*Resolved{}, now: time.Now}
}

var (
	errTokenNotFound = errors.New("ACL token not found")
	errTokenExpired  = errors.New("ACL token expired")
)

// Resolve returns the ACL of secret ("" = anonymous: the anonymous policy,
// deny-all when there is none). An unknown or expired secret is an error
// that never repeats the secret.
func (r *TokenResolver) Resolve(state *fsm.StateStore, secret string) (*Resolved, error) {
	index := state.ACLIndex()
	r.mu.Lock()
	r.refresh(state, index)
	if len(r.cache) >= maxCachedTokens {
		r.cache = map[string]*Resolved{}
	}
	res, ok := r.cache[secret]
	r.mu.Unlock()
	if ok {
		if res.Token != nil && res.Token.Expired(r.now()) {
			return nil, errTokenExpired
		}
		return res, nil
	}
	res, err := resolve(state, secret, r.now())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.state == state && r.index == index {
		r.cache[secret] = res
	}
	r.mu.Unlock()
	return res, nil
}

// refresh starts the cache afresh when the state or its ACL index moved.
// Called with mu held.
func (r *TokenResolver) refresh(state *fsm.StateStore, index uint64) {
	if r.state != state || r.index != index {
		r.state, r.index, r.cache = state, index, map[string]*Resolved{}
		r.serverSecret, r.serverKnown = "", false
	}
}

// ServerSecret is the cluster's server token ("" before one exists),
// cached like resolved tokens: every call that carries a token compares it.
func (r *TokenResolver) ServerSecret(state *fsm.StateStore) string {
	index := state.ACLIndex()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh(state, index)
	if !r.serverKnown {
		if t := state.ServerToken(); t != nil {
			r.serverSecret = t.SecretID
		}
		r.serverKnown = true
	}
	return r.serverSecret
}

func resolve(state *fsm.StateStore, secret string, now time.Time) (*Resolved, error) {
	if secret == "" {
		return &Resolved{ACL: policiesACL(state, []string{structs.AnonymousPolicy})}, nil
	}
	tok, err := state.ACLTokenBySecret(nil, secret)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, errTokenNotFound
	}
	if tok.Expired(now) {
		return nil, errTokenExpired
	}
	switch tok.Type {
	case structs.ACLTokenManagement, structs.ACLTokenServer:
		return &Resolved{Token: tok, ACL: acl.Management()}, nil
	}
	return &Resolved{Token: tok, ACL: policiesACL(state, tok.Policies)}, nil
}

// policiesACL compiles the named policies; a deleted policy (or one that
// no longer parses) grants nothing.
func policiesACL(state *fsm.StateStore, names []string) *acl.ACL {
	var pols []*acl.Policy
	for _, name := range names {
		p, err := state.ACLPolicyByName(nil, name)
		if err != nil || p == nil {
			continue
		}
		parsed, err := acl.Parse("policy "+p.Name, []byte(p.Rules))
		if err != nil {
			continue
		}
		pols = append(pols, parsed)
	}
	return acl.New(pols...)
}

// SecurityCounters count refused connections and calls, for operators
// (Status.Runtime, and metrics). Safe for concurrent use.
type SecurityCounters struct {
	ACLDenied         atomic.Uint64
	TLSHandshakeFails atomic.Uint64
	PlaintextRefused  atomic.Uint64
	// OpeningRefused: connections closed at once because too many were
	// still opening (in all, or from one address).
	OpeningRefused atomic.Uint64
	// RequestsRefused: RPC requests refused while being read (a budget
	// for unfinished requests, or the read deadline); StreamsRefused:
	// yamux streams closed at once past a session's stream limit.
	RequestsRefused atomic.Uint64
	StreamsRefused  atomic.Uint64
	// QueriesWaiting: blocking queries waiting for a change now (each
	// holds a goroutine until it answers or its wait runs out).
	QueriesWaiting atomic.Int64
	// QueriesRefused: reads refused past a limit on reads in flight
	// (query_gate.go); RegistrationsRefused: new nodes refused past
	// their certificate's rate or cap (register_limits.go).
	QueriesRefused       atomic.Uint64
	RegistrationsRefused atomic.Uint64

	// The server's gates, here because every server has one
	// SecurityCounters and the endpoints of every connection share it.
	queries       queryGate
	registrations registerLimiter
}
