package endpoints

import (
	"crypto/subtle"
	"errors"
	"fmt"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"

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
	"Volume.Get":        capability(acl.Volume, acl.Read),
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

	"Node.Register":     capabilityOrNode(acl.Node, acl.Write),
	"Node.UpdateStatus": capabilityOrNode(acl.Node, acl.Write),
	"Node.UpdateAlloc":  capabilityOrNode(acl.Node, acl.Write),
	"Node.Deregister":   capability(acl.Node, acl.Write),
	"Node.Get":          capability(acl.Node, acl.Read),
	"Node.List":         capability(acl.Node, acl.Read),

	"Alloc.Place": capability(acl.Alloc, acl.Place),
	"Alloc.Stop":  capability(acl.Alloc, acl.Stop),
	"Alloc.Get":   capabilityOrNode(acl.Alloc, acl.Read),
	"Alloc.List":  capabilityOrNode(acl.Alloc, acl.Read),

	"Plugin.Get":  capability(acl.Plugin, acl.Read),
	"Plugin.List": capability(acl.Plugin, acl.Read),

	"Eval.Get":              capability(acl.Volume, acl.Read),
	"Eval.List":             capability(acl.Volume, acl.Read),
	"System.ReleaseStatus":  capability(acl.Volume, acl.Read),
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

// authz checks the calls of one connection. A nil *authz is an in-process
// call from the server itself (the release watcher calling ClientCSI) and
// is always allowed.
type authz struct {
	srv  Server
	conn ConnInfo
}

// caller is who made a call, as far as the check needed to know.
type caller struct {
	srv   Server
	token string
	// acl is the token's grants; nil when ACLs are off (everything allowed).
	acl *acl.ACL
	// server: a claimd server (certificate or server token), or in-process.
	server bool
	need   access
	// lazy: the token is resolved by granted() when first needed (methods
	// a node may call, where the node secret is checked first).
	lazy bool
	a    *authz
}

// check authorizes one call after forwarding: the server that serves a
// call decides, with the caller's token forwarded unchanged.
func (a *authz) check(method string, args structs.Authenticated) (*caller, error) {
	if a == nil {
		return &caller{server: true}, nil
	}
	need, ok := methodAccess[method]
	if !ok {
		return nil, a.deny(method, "no access rule for this method")
	}
	token := args.Token()
	c := &caller{srv: a.srv, token: token, need: need}
	if f, ok := args.(interface{ IsForwarded() bool }); ok && f.IsForwarded() && a.conn.TLS && a.conn.Role != tlsutil.RoleServer {
		return nil, a.deny(method, "a forwarded request must come from a server certificate")
	}
	// A server certificate proves the caller is a server, not what the
	// request may do: a forwarded request arrives on a server's connection
	// with its user's token, and that token decides. Only the server token
	// (which never leaves the servers) makes the server itself the caller.
	c.server = a.isServerToken(token)
	serverCert := a.conn.Role == tlsutil.RoleServer
	aclOn := a.srv.ACLEnabled()
	switch need.kind {
	case open:
		return c, nil
	case serverCertKind:
		if !a.conn.TLS || serverCert {
			return c, nil
		}
		return nil, a.deny(method, "a server certificate is required")
	case serverOnly:
		if serverCert || c.server || (!a.conn.TLS && !aclOn) {
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
		// handler checks it against the node the call acts for first, and
		// resolves the token as an ACL token only if that fails.
		c.a, c.lazy = a, true
		return c, nil
	}
	resolved, err := a.resolve(token)
	if err != nil {
		return nil, a.deny(method, err.Error())
	}
	c.acl = resolved.ACL
	switch need.kind {
	case management:
		if !c.acl.IsManagement() {
			return nil, a.deny(method, "a management token is required")
		}
	case anyToken:
		if resolved.Token == nil {
			return nil, a.deny(method, "an ACL token is required")
		}
	case needCapability:
		if !c.acl.Allow(need.res, need.cap) {
			return nil, a.deny(method, fmt.Sprintf("the token does not grant %s:%s", need.res, need.cap))
		}
	}
	return c, nil
}

// resolve turns a token into its ACL. A leader whose barrier is still
// pending may not have applied the entry that made the token: it waits for
// the barrier (and confirms it still leads) and looks again. Only then:
// waiting on every unknown token would let anyone make the leader run a
// quorum round per guess.
func (a *authz) resolve(token string) (*Resolved, error) {
	resolved, err := a.srv.Tokens().Resolve(a.srv.State(), token)
	if errors.Is(err, errTokenNotFound) && a.srv.BarrierPending() && a.srv.WaitConsistentReads() == nil {
		resolved, err = a.srv.Tokens().Resolve(a.srv.State(), token)
	}
	return resolved, err
}

// isServerToken compares in constant time with the cluster's server token
// (which exists only with ACLs on).
func (a *authz) isServerToken(token string) bool {
	if token == "" || !a.srv.ACLEnabled() {
		return false
	}
	secret := a.srv.Tokens().ServerSecret(a.srv.State())
	return secret != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(token)) == 1
}

// deny logs and counts a refusal and returns the error the caller sees.
// Neither the log line nor the error carries the token.
func (a *authz) deny(method, why string) error {
	a.srv.Security().ACLDenied.Add(1)
	metrics.IncrCounterWithLabels([]string{"acl", "denied"}, 1, []metrics.Label{{Name: "method", Value: method}})
	a.srv.Logger().Warn("permission denied", "method", method, "reason", why, "remote", a.conn.Remote)
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
		if resolved, err := c.a.resolve(c.token); err == nil {
			c.acl = resolved.ACL
		}
	}
	return c.acl == nil || c.acl.Allow(c.need.res, c.need.cap)
}

// isNode reports whether the caller authenticated as nodeID with its node
// secret (constant-time comparison). Independent of ACLs: it decides who
// sees a volume's secrets.
func (c *caller) isNode(nodeID string) bool {
	if c == nil || c.srv == nil || c.token == "" || nodeID == "" {
		return false
	}
	n, err := c.srv.State().NodeByID(nil, nodeID)
	if err != nil || n == nil || n.SecretID == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(n.SecretID), []byte(c.token)) == 1
}

// allowNode is the second half of a capabilityOrNode check: the token's
// capability, or the node secret of the node the call acts for.
func (c *caller) allowNode(a *authz, method, nodeID string) error {
	if c.isNode(nodeID) || c.granted() {
		return nil
	}
	if nodeID != "" && c.srv.Raft().State() != raft.Leader {
		// A follower answering a stale read may not have applied the
		// node's registration yet: that is "not yet", not "no".
		if n, err := c.srv.State().NodeByID(nil, nodeID); err == nil && n == nil {
			return structs.NewError(structs.CodeUnavailable, fmt.Sprintf(
				"%s: this server does not know node %q yet; retry", method, nodeID))
		}
	}
	if nodeID == "" {
		return a.deny(method, fmt.Sprintf("the token does not grant %s:%s", c.need.res, c.need.cap))
	}
	return a.deny(method, fmt.Sprintf("the token does not grant %s:%s and is not node %q's secret", c.need.res, c.need.cap, nodeID))
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
