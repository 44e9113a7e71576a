package acl

import "strings"

// ACL is what one token may do: the union of its policies' grants, minus
// every resource any of its policies denies. It is built once and never
// changed, so it is safe for concurrent use without locks.
//
// A nil *ACL means ACLs are disabled: it allows everything. Endpoints can
// therefore call Allow unconditionally; the server hands out nil only when
// ACL enforcement is off, never for a token it failed to resolve (that
// token gets DenyAll).
type ACL struct {
	management bool
	// grants holds, per resource, a bit for each capability granted, at
	// the capability's position in Capabilities(r). A resource absent
	// from the map is granted nothing.
	grants map[Resource]uint16
}

// management is shared: an ACL is immutable, so one value serves all
// management tokens.
var management = &ACL{management: true}

// Management returns the ACL of a management token: it allows every
// capability on every resource.
func Management() *ACL { return management }

// DenyAll allows nothing. It is the ACL for a token with no policies, or
// for a request whose token does not resolve.
var DenyAll = New()

// New combines policies into an ACL. A capability is allowed when any
// policy grants it and no policy denies its resource: deny wins, so an
// operator can take a resource away from a token by adding a policy,
// without editing the policies that grant it. New() with no policies
// denies everything. Nil policies are skipped.
//
// New trusts its input to come from Parse. A hand-built policy with an
// unknown resource, policy value or capability has that part ignored: it
// never grants more than a parsed policy could.
func New(policies ...*Policy) *ACL {
	a := &ACL{grants: make(map[Resource]uint16)}
	denied := make(map[Resource]bool)
	for _, p := range policies {
		if p == nil {
			continue
		}
		for r, rule := range p.Rules {
			if rule.Policy == PolicyDeny {
				denied[r] = true
				continue
			}
			if bits := rule.grants(r); bits != 0 {
				a.grants[r] |= bits
			}
		}
	}
	for r := range denied {
		delete(a.grants, r)
	}
	return a
}

// grants returns the capability bits rule grants on r.
func (rule Rule) grants(r Resource) uint16 {
	var bits uint16
	switch rule.Policy {
	case PolicyRead:
		bits |= capBit(r, Read)
	case PolicyWrite:
		for _, c := range Capabilities(r) {
			bits |= capBit(r, c)
		}
	}
	for _, c := range rule.Capabilities {
		bits |= capBit(r, c)
	}
	return bits
}

// capBit is c's bit in r's grant mask, or 0 when r has no capability c.
func capBit(r Resource, c Capability) uint16 {
	i := capIndex(r, c)
	if i < 0 {
		return 0
	}
	return 1 << i
}

// Allow reports whether the ACL allows capability c on resource r. A nil
// ACL (ACLs disabled) and a management ACL allow everything; any other
// ACL refuses a capability that r does not have, such as Place on Volume.
func (a *ACL) Allow(r Resource, c Capability) bool {
	if a == nil || a.management {
		return true
	}
	bit := capBit(r, c)
	return bit != 0 && a.grants[r]&bit != 0
}

// IsManagement reports whether the ACL belongs to a management token,
// which may also manage ACLs themselves. A nil ACL (ACLs disabled) is not
// management: with ACLs off there are no ACLs to manage.
func (a *ACL) IsManagement() bool {
	return a != nil && a.management
}

// String describes the grants for debug logs, resources and capabilities
// in their stable order: "volume:read,detach alloc:read". It shows
// "management", "none" for an ACL that allows nothing, and "disabled" for
// a nil ACL.
func (a *ACL) String() string {
	switch {
	case a == nil:
		return "disabled"
	case a.management:
		return "management"
	}
	var b strings.Builder
	for _, r := range Resources() {
		bits := a.grants[r]
		if bits == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(r))
		sep := byte(':')
		for i, c := range Capabilities(r) {
			if bits&(1<<i) != 0 {
				b.WriteByte(sep)
				b.WriteString(string(c))
				sep = ','
			}
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}
