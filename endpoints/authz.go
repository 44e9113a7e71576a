package endpoints

import (
	"crypto/subtle"
	"errors"
	"fmt"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/claimd/claimd/acl"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// accessKind says how a method is authorized.
type accessKind uint8

const (
	// needCapability: a token whose policies grant res:cap (or a server).
	needCapability accessKind = iota
	// open: anyone (liveness and the leader's address).
	open
	// serverOnly: a claimd server: a server certificate, or on a plaintext
	// connection the cluster's server token when ACLs are on.
	serverOnly
	// serverCertKind: a server certificate when the connection is TLS; on a
	// plaintext connection anyone (bootstrap and join happen before a
	// server has any state, so there is no token to show; without TLS the
	// Raft port itself is unauthenticated, see docs/security.md).
	serverCertKind
	// management: a management token (ACL administration).
	management
	// anyToken: any valid ACL token (reading one's own token).
	anyToken
	// bootstrap: anyone, once (ACL.Bootstrap checks in the state machine).
	bootstrap
)

// access is what one RPC method needs.
type access struct {
	kind accessKind
	res  acl.Resource
	cap  acl.Capability
	// node: a client agent may also call it with its node secret, for its
	// own node only; the handler says which node with caller.allowNode.
	node bool
}

func capability(res acl.Resource, c acl.Capability) access {
	return access{kind: needCapability, res: res, cap: c}
}

func capabilityOrNode(res acl.Resource, c acl.Capability) access {
	return access{kind: needCapability, res: res, cap: c, node: true}
}

// methodAccess is the one table of who may call what. Every registered
// method must have an entry: authz.check refuses a method without one, and
// the authorization matrix test fails for it.
var methodAccess = map[string]access{
	"Status.Ping":        {kind: open},
	"Status.Leader":      {kind: open},
	"Status.Peers":       {kind: open},
	"Status.Hello":       {kind: serverCertKind},
	"Status.HasNodeConn": {kind: serverOnly},
	"Status.StateDigest": capability(acl.Operator, acl.Read),
	"Status.Runtime":     capability(acl.Operator, acl.Read),
	"Status.RaftStats":   {kind: serverOnly},

	"Operator.RaftGetConfiguration": capability(acl.Operator, acl.Read),
	"Operator.RaftRemovePeer":       capability(acl.Operator, acl.Write),
	"Operator.RaftJoin":             {kind: serverCertKind},
	"Operator.TransferLeadership":   capability(acl.Operator, acl.Write),
	"Operator.RaftHealth":           capability(acl.Operator, acl.Read),

	"Volume.Register":   capability(acl.Volume, acl.Register),
	"Volume.Deregister": capability(acl.Volume, acl.Deregister),
	"Volume.Get":        capabilityOrNode(acl.Volume, acl.Read),
	"Volume.List":       capability(acl.Volume, acl.Read),
	"Volume.Detach":     capability(acl.Volume, acl.Detach),
	"Volume.Claim":      capabilityOrNode(acl.Volume, acl.Claim),
	"Volume.Create":     capability(acl.Volume, acl.Create),
	"Volume.Delete":     capability(acl.Volume, acl.Delete),
	// Snapshots and expansion reuse create and delete: what makes the
	// storage system hold more data needs create, what destroys data
	// needs delete (decision 32).
	"Volume.SnapshotCreate": capability(acl.Volume, acl.Create),
	"Volume.SnapshotDelete": capability(acl.Volume, acl.Delete),
	"Volume.SnapshotList":   capability(acl.Volume, acl.Read),
	"Volume.Expand":         capability(acl.Volume, acl.Create),
	"Volume.Modify":         capability(acl.Volume, acl.Create),

	"Node.Register":     capabilityOrNode(acl.Node, acl.Write),
	"Node.UpdateStatus": capabilityOrNode(acl.Node, acl.Write),
	// A follower's gathered heartbeats: only a server sends a batch, and
	// each item is then checked as Node.UpdateStatus (decision 43).
	"Node.UpdateStatusBatch": {kind: serverOnly},
	"Node.UpdateAlloc":       capabilityOrNode(acl.Node, acl.Write),
	"Node.Deregister":        capability(acl.Node, acl.Write),
	// Drain and eligibility are an operator's: a node's own secret does
	// not take its node out of service.
	"Node.UpdateEligibility": capability(acl.Node, acl.Write),
	"Node.Drain":             capability(acl.Node, acl.Write),
	"Node.DrainStatus":       capability(acl.Node, acl.Read),
	"Node.Get":               capability(acl.Node, acl.Read),
	"Node.List":              capability(acl.Node, acl.Read),
	// Purge frees a deregistered node's ID for another secret: the one
	// thing that moves a node's identity, so a management token's
	// (issue 38).
	"Node.Purge": {kind: management},

	"Alloc.Place": capability(acl.Alloc, acl.Place),
	"Alloc.Stop":  capability(acl.Alloc, acl.Stop),
	"Alloc.Get":   capabilityOrNode(acl.Alloc, acl.Read),
	"Alloc.List":  capabilityOrNode(acl.Alloc, acl.Read),

	"Plugin.Get":  capability(acl.Plugin, acl.Read),
	"Plugin.List": capability(acl.Plugin, acl.Read),
	// Admitting a controller hands it volume secrets (issue 38).
	"Plugin.AdmitController":  capability(acl.Plugin, acl.Write),
	"Plugin.RevokeController": capability(acl.Plugin, acl.Write),

	"Eval.Get":             capability(acl.Volume, acl.Read),
	"Eval.List":            capability(acl.Volume, acl.Read),
	"System.ReleaseStatus": capability(acl.Volume, acl.Read),
	// Reconcile lists the storage through a controller, records the round
	// and may detach an orphan: detach. Reading the rounds is a read.
	"Volume.Reconcile":      capability(acl.Volume, acl.Detach),
	"Volume.StorageReports": capability(acl.Volume, acl.Read),
	"Volume.Storage":        capability(acl.Volume, acl.Read),
	"Volume.Usage":          capability(acl.Volume, acl.Read),
	"System.GarbageCollect": capability(acl.Operator, acl.Write),

	"ClientCSI.ControllerAttachVolume":   {kind: serverOnly},
	"ClientCSI.ControllerDetachVolume":   {kind: serverOnly},
	"ClientCSI.NodeDetachVolume":         {kind: serverOnly},
	"ClientCSI.ControllerCreateVolume":   {kind: serverOnly},
	"ClientCSI.ControllerDeleteVolume":   {kind: serverOnly},
	"ClientCSI.ControllerCreateSnapshot": {kind: serverOnly},
	"ClientCSI.ControllerDeleteSnapshot": {kind: serverOnly},
	"ClientCSI.ControllerListSnapshots":  {kind: serverOnly},
	"ClientCSI.ControllerExpandVolume":   {kind: serverOnly},
	"ClientCSI.NodeExpandVolume":         {kind: serverOnly},
	"ClientCSI.ControllerListVolumes":    {kind: serverOnly},
	"ClientCSI.ControllerModifyVolume":   {kind: serverOnly},
	"ClientCSI.NodeVolumeStats":          {kind: serverOnly},
	"ClientCSI.NodeHeldVolume":           {kind: serverOnly},

	"ACL.Bootstrap":    {kind: bootstrap},
	"ACL.PolicyUpsert": {kind: management},
	"ACL.PolicyDelete": {kind: management},
	"ACL.PolicyGet":    {kind: management},
	"ACL.PolicyList":   {kind: management},
	"ACL.TokenCreate":  {kind: management},
	"ACL.TokenDelete":  {kind: management},
	"ACL.TokenGet":     {kind: management},
	"ACL.TokenList":    {kind: management},
	"ACL.TokenSelf":    {kind: anyToken},
}

// authz checks the calls of one connection. Every call through the
// endpoints comes over a connection and is checked; the server's own work
// (the release watcher, a claim's publish) calls package attachment
// directly instead of going through an endpoint.
//
// Where the checks sit (decision 37): the server a call enters on decides
// it, before any forwarding, with what it sees of the caller (the
// connection's certificate role, the token, a node's secret). A forwarded
// call carries that identity (structs.CallOrigin) and the token, and the
// server that serves it checks them again, never the forwarding server's
// own connection. The one thing an entry server may leave to the leader is
// what it cannot know yet because its state lags: a token or a node it has
// not applied. Everything that depends on the connection is decided where
// the connection is.
type authz struct {
	srv  *Deps
	conn ConnInfo
}

// identity is who made a call as far as a connection can tell: the one the
// call entered the cluster on.
type identity struct {
	tls  bool
	role tlsutil.Role
	// forwarded: the identity came from a forwarding server's CallOrigin,
	// so this connection's remote address is not the caller's.
	forwarded bool
	// cert is the SHA-256 of the entry connection's leaf certificate.
	cert string
}

func (id identity) serverCert() bool { return id.tls && id.role == tlsutil.RoleServer }

// caller is who made a call, as far as the check needed to know.
type caller struct {
	srv   *Deps
	token string
	id    identity
	// acl is the token's grants; nil when ACLs are off (everything allowed).
	acl *acl.ACL
	// server: a claimd server (certificate or server token), or in-process.
	server bool
	need   access
	// lazy: the token is resolved by granted() when first needed (methods
	// a node may call, where the node secret is checked first).
	lazy bool
	a    *authz
	// mayDefer: the call entered here and goes to the leader next, so what
	// this server cannot know yet (an unknown token or node) is left to
	// the leader, which checks the same identity. deferred: that happened.
	mayDefer, deferred bool
	// tokenUnknown: the token resolved to "not found" on this server.
	tokenUnknown bool
	// node is the node whose secret authorized the call ("" if none).
	node string
	// reply is the call's reply: a parked blocking query empties it while
	// it waits, and a read's place in the query gate is freed when it is
	// written (query_gate.go).
	reply any
}

// gate is the first line of every endpoint that may forward: it authorizes
// the call where it entered, then forwards it to the leader or says to
// serve it here. extra, when not nil, is the method's own part of the
// check that needs its arguments (which node a node secret must belong to:
// see forNode); it runs after the access rule, on the entry server and
// again on the server that serves the call. A call served here returns its
// caller; done means the answer is in reply (or err).
func (a *authz) gate(method string, args structs.RPCInfo, reply any, extra func(*caller) error) (c *caller, done bool, err error) {
	stale := args.IsRead() && args.AllowStaleRead()
	entry := !args.IsForwarded() && !stale && !a.isLeader()
	if c, err = a.authorize(method, args, extra, entry); err != nil {
		return nil, true, err
	}
	// A read holds a place in this server's query gate while it is in
	// flight here, forwarded ones included: their answers wait here for
	// the caller as any other's do (query_gate.go).
	release, err := a.enterRead(c, method, args)
	if err != nil {
		return nil, true, err
	}
	done, err = a.srv.Forward(method, args, args, reply)
	if done && err == nil && release != nil {
		releaseOnWrite(reply, release)
	} else if release != nil {
		release() // served here: blockingQuery takes its own place
	}
	if done {
		return c, true, err
	}
	if c.mayDefer {
		// Leadership came here while the call waited: it is served here
		// after all, so it is decided here, with nothing left over.
		if c, err = a.authorize(method, args, extra, false); err != nil {
			return nil, true, err
		}
	}
	c.reply = reply
	return c, false, nil
}

// enterRead admits a read about to be forwarded into this server's query
// gate (nil release for a write).
func (a *authz) enterRead(c *caller, method string, args structs.RPCInfo) (func(), error) {
	if !args.IsRead() || a.srv.Security == nil {
		return nil, nil
	}
	return a.srv.Security.queries.enter(a.srv, c, method)
}

// authorize is checkCall plus the method's own part.
func (a *authz) authorize(method string, args structs.RPCInfo, extra func(*caller) error, mayDefer bool) (*caller, error) {
	c, err := a.checkCall(method, args, mayDefer)
	if err != nil || c.server || c.deferred || extra == nil {
		return c, err
	}
	if err := extra(c); err != nil {
		return nil, err
	}
	return c, nil
}

// forNode is the extra check of a method a client agent may call with its
// node secret: nodeOf names the node the call acts for as this server sees
// it (known false when this server cannot tell, such as for an allocation
// it has not applied). An entry server that cannot tell leaves it to the
// leader; the server that serves the call treats an unknown node as none,
// so only the token can allow the call.
func (a *authz) forNode(method string, nodeOf func() (node string, known bool)) func(*caller) error {
	return func(c *caller) error {
		if !a.srv.ACLEnabled() {
			return nil
		}
		node, known := nodeOf()
		if !known && c.mayDefer {
			c.deferred = true
			return nil
		}
		return c.allowNode(a, method, node)
	}
}

// check authorizes a call served here without forwarding (Status and
// ClientCSI calls, which are never forwarded to the leader).
func (a *authz) check(method string, args structs.Authenticated) (*caller, error) {
	return a.checkCall(method, args, false)
}

func (a *authz) isLeader() bool { return a.srv.IsLeader() }

// identify says who made the call. A call that entered here is this
// connection, and its CallOrigin is overwritten with it (whatever the
// caller put there is not believed). A forwarded call is the connection it
// entered on, believed only from a server's TLS connection.
func (a *authz) identify(method string, args structs.Authenticated) (identity, error) {
	conn := identity{tls: a.conn.TLS, role: a.conn.Role, cert: a.conn.PeerCert}
	info, ok := args.(structs.RPCInfo)
	if !ok {
		return conn, nil
	}
	origin := info.CallOrigin()
	if !info.IsForwarded() {
		*origin = structs.CallOrigin{TLS: conn.tls, Role: string(conn.role), PeerCert: conn.cert}
		return conn, nil
	}
	if conn.serverCert() {
		return identity{tls: origin.TLS, role: tlsutil.Role(origin.Role), forwarded: true, cert: origin.PeerCert}, nil
	}
	if conn.tls {
		return identity{}, a.deny(method, "a forwarded request must come from a server certificate")
	}
	// Over plaintext the forwarded flag proves nothing: the connection is
	// the caller, with no role.
	*origin = structs.CallOrigin{}
	return conn, nil
}

// checkCall authorizes one call: who the caller is (identify), then what
// the method's access rule needs of that identity and its token.
func (a *authz) checkCall(method string, args structs.Authenticated, mayDefer bool) (*caller, error) {
	need, ok := methodAccess[method]
	if !ok {
		return nil, a.deny(method, "no access rule for this method")
	}
	id, err := a.identify(method, args)
	if err != nil {
		return nil, err
	}
	token := args.Token()
	c := &caller{srv: a.srv, token: token, id: id, need: need, a: a, mayDefer: mayDefer}
	// A server certificate proves the caller is a server, not what the
	// request may do: a forwarded request arrives on a server's connection
	// with its user's token and origin, and those decide. Only the server
	// token (which never leaves the servers) makes the server itself the
	// caller.
	c.server = a.isServerToken(token)
	aclOn := a.srv.ACLEnabled()
	switch need.kind {
	case open:
		return c, nil
	case serverCertKind:
		// Bootstrap and join happen before a server has any state, so
		// there is no token to show: only the certificate counts. A
		// plaintext cluster has none; a server with TLS configured (even
		// in migration mode) never takes a membership change or a hello
		// over plaintext.
		if id.serverCert() || (!id.tls && !a.conn.ServerTLS) {
			return c, nil
		}
		return nil, a.deny(method, "a server certificate is required")
	case serverOnly:
		if id.serverCert() || c.server {
			return c, nil
		}
		if !id.tls && !aclOn && (!a.conn.ServerTLS || (!id.forwarded && a.fromRaftMember())) {
			// Without ACLs a plaintext server has only its address to
			// show: any caller in a plaintext cluster, and in migration
			// mode only a host already in the Raft configuration.
			return c, nil
		}
		return nil, a.deny(method, "only servers may call it")
	case bootstrap:
		if !aclOn {
			return nil, structs.NewError(structs.CodeInvalid, "ACLs are not enabled on this server (-acl-enabled)")
		}
		return c, nil
	}
	if c.server {
		return c, nil
	}
	if !aclOn {
		if need.kind == management || need.kind == anyToken {
			return nil, structs.NewError(structs.CodeInvalid, "ACLs are not enabled on this server (-acl-enabled)")
		}
		return c, nil
	}
	if need.node {
		// A client agent's node secret is the usual credential here: the
		// node check comes first, and the token is resolved as an ACL
		// token only if that fails.
		c.lazy = true
		return c, nil
	}
	if mayDefer && a.srv.State().ACLIndex() == 0 {
		// This server has applied no ACL state at all (it is joining, or
		// no leader has ever served): it cannot tell a token, or the
		// anonymous policy, from nothing. The leader decides, or the
		// caller learns there is none.
		c.deferred = true
		return c, nil
	}
	resolved, err := a.resolve(token)
	if err != nil {
		if mayDefer && errors.Is(err, errTokenNotFound) {
			// This server may not have applied the token yet; the leader
			// has, or refuses it.
			c.deferred = true
			return c, nil
		}
		return nil, a.deny(method, err.Error())
	}
	c.acl = resolved.ACL
	if err := c.allowedBy(resolved); err != nil {
		return nil, a.deny(method, err.Error())
	}
	return c, nil
}

// allowedBy checks a resolved token against the method's need.
func (c *caller) allowedBy(resolved *Resolved) error {
	switch c.need.kind {
	case management:
		if !resolved.ACL.IsManagement() {
			return errors.New("a management token is required")
		}
	case anyToken:
		if resolved.Token == nil {
			return errors.New("an ACL token is required")
		}
	case needCapability:
		if !resolved.ACL.Allow(c.need.res, c.need.cap) {
			return fmt.Errorf("the token does not grant %s:%s", c.need.res, c.need.cap)
		}
	}
	return nil
}

// fromRaftMember reports whether this connection's remote host is the
// host of a server in the Raft configuration (migration mode's test for a
// plaintext server-only call).
func (a *authz) fromRaftMember() bool { return a.srv.RaftMemberHost(a.conn.Remote) }

// resolve turns a token into its ACL. A leader whose barrier is still
// pending may not have applied the entry that made the token: it waits for
// the barrier (and confirms it still leads) and looks again. Only then:
// waiting on every unknown token would let anyone make the leader run a
// quorum round per guess.
func (a *authz) resolve(token string) (*Resolved, error) {
	resolved, err := a.srv.Tokens.Resolve(a.srv.State(), token)
	if errors.Is(err, errTokenNotFound) && a.srv.BarrierPending() && a.srv.WaitConsistentReads() == nil {
		resolved, err = a.srv.Tokens.Resolve(a.srv.State(), token)
	}
	return resolved, err
}

// isServerToken compares in constant time with the cluster's server token
// (which exists only with ACLs on).
func (a *authz) isServerToken(token string) bool {
	if token == "" || !a.srv.ACLEnabled() {
		return false
	}
	secret := a.srv.Tokens.ServerSecret(a.srv.State())
	return secret != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(token)) == 1
}

// deny logs and counts a refusal and returns the error the caller sees.
// Neither the log line nor the error carries the token.
func (a *authz) deny(method, why string) error {
	a.srv.Security.ACLDenied.Add(1)
	metrics.IncrCounterWithLabels([]string{"acl", "denied"}, 1, []metrics.Label{{Name: "method", Value: method}})
	a.srv.Logger.Warn("permission denied", "method", method, "reason", why, "remote", a.conn.Remote)
	return structs.NewError(structs.CodePermissionDenied, method+": "+why)
}

// granted reports whether the caller's token grants what the method needs
// (true when ACLs are off or the caller is a server). For a method a node
// may call, the token is resolved here, the first time it is needed.
func (c *caller) granted() bool {
	if c.server {
		return true
	}
	if c.lazy {
		c.lazy, c.acl = false, acl.DenyAll
		resolved, err := c.a.resolve(c.token)
		switch {
		case err == nil:
			c.acl = resolved.ACL
		case errors.Is(err, errTokenNotFound):
			c.tokenUnknown = true
		}
	}
	return c.acl == nil || c.acl.Allow(c.need.res, c.need.cap)
}

// isNode reports whether the caller authenticated as nodeID with its node
// secret (constant-time comparison). Independent of ACLs: it decides who
// sees a volume's secrets and whose session is the node's.
func (c *caller) isNode(nodeID string) bool {
	if c == nil || c.srv == nil || c.token == "" || nodeID == "" {
		return false
	}
	n, err := c.srv.State().NodeByID(nil, nodeID)
	if err != nil {
		return false
	}
	return c.holdsSecretOf(n)
}

// holdsSecretOf reports whether the caller's token is node n's secret, for
// a handler that has read the node already.
func (c *caller) holdsSecretOf(n *structs.Node) bool {
	if n == nil || n.SecretID == "" || c.token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(n.SecretID), []byte(c.token)) == 1
}

// provedNode reports whether the caller showed the node's own secret: as
// the access check found it (c.node, with ACLs on), or, with ACLs off,
// where the check did not look, by comparing it now (read, the node as the
// handler read it, saves reading it again; nil reads it). Binding a node's
// session needs this proof whether or not ACLs are on (decision 37).
func (c *caller) provedNode(nodeID string, read *structs.Node) bool {
	if c == nil || nodeID == "" {
		return false
	}
	if c.node != "" {
		return c.node == nodeID
	}
	if c.srv.ACLEnabled() {
		return false
	}
	if read != nil && read.ID == nodeID {
		return c.holdsSecretOf(read)
	}
	return c.isNode(nodeID)
}

// nodeKnown reports whether this server has applied nodeID's registration.
func (c *caller) nodeKnown(nodeID string) bool {
	n, err := c.srv.State().NodeByID(nil, nodeID)
	return err == nil && n != nil
}

// allowNode is the second half of a capabilityOrNode check: the token's
// capability, or the node secret of the node the call acts for.
func (c *caller) allowNode(a *authz, method, nodeID string) error {
	if c.isNode(nodeID) {
		c.node = nodeID
		return nil
	}
	if c.granted() {
		return nil
	}
	if c.mayDefer && (c.tokenUnknown || (nodeID != "" && !c.nodeKnown(nodeID))) {
		// This server may lag: the leader decides, with the same caller.
		c.deferred = true
		return nil
	}
	if nodeID != "" && !a.isLeader() && !c.nodeKnown(nodeID) {
		// A follower answering a stale read may not have applied the
		// node's registration yet: that is "not yet", not "no".
		return structs.NodeNotYetKnownError(method, nodeID)
	}
	if nodeID == "" {
		return a.deny(method, fmt.Sprintf("the token does not grant %s:%s", c.need.res, c.need.cap))
	}
	return a.deny(method, fmt.Sprintf("the token does not grant %s:%s and is not node %q's secret", c.need.res, c.need.cap, nodeID))
}

// stillAllowed checks the caller again, for a blocking query about to
// answer after it waited: a token deleted (or expired, or a node
// deregistered) while the query waited gets no fresh data.
func (c *caller) stillAllowed(method string) error {
	if c == nil || c.server || c.srv == nil || !c.srv.ACLEnabled() {
		return nil
	}
	if c.node != "" {
		if c.isNode(c.node) {
			return nil
		}
		return c.a.deny(method, fmt.Sprintf("node %q's secret is no longer valid", c.node))
	}
	resolved, err := c.a.resolve(c.token)
	if err != nil {
		return c.a.deny(method, err.Error())
	}
	if err := c.allowedBy(resolved); err != nil {
		return c.a.deny(method, err.Error())
	}
	return nil
}

// AccessRule describes what one method needs, for the authorization
// matrix test and for docs.
type AccessRule struct {
	// Kind is "capability", "open", "server", "server-cert", "management",
	// "any-token" or "bootstrap".
	Kind       string
	Resource   acl.Resource
	Capability acl.Capability
	// Node: a client agent may call it with its node secret, for its own
	// node.
	Node bool
}

// AccessRules returns the access table by method name ("Volume.Claim").
func AccessRules() map[string]AccessRule {
	names := map[accessKind]string{needCapability: "capability", open: "open", serverOnly: "server",
		serverCertKind: "server-cert", management: "management", anyToken: "any-token", bootstrap: "bootstrap"}
	out := make(map[string]AccessRule, len(methodAccess))
	for m, a := range methodAccess {
		out[m] = AccessRule{Kind: names[a.kind], Resource: a.res, Capability: a.cap, Node: a.node}
	}
	return out
}
