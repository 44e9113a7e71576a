package acl

// Resource is a kind of object an endpoint guards. Each resource is one
// block in the policy language.
type Resource string

// The resources, in the order Resources returns them.
const (
	Volume   Resource = "volume"
	Alloc    Resource = "alloc"
	Node     Resource = "node"
	Plugin   Resource = "plugin"
	Operator Resource = "operator"
)

// Capability is one thing that may be done to a resource. A capability
// means something only together with its resource: Place exists only for
// Alloc, and Write is a capability only of Node, Plugin and Operator (a volume
// write is checked by its fine capability, such as Register or Claim).
type Capability string

// The capabilities of all resources.
const (
	Read       Capability = "read"
	Register   Capability = "register"
	Deregister Capability = "deregister"
	Detach     Capability = "detach"
	Claim      Capability = "claim"
	Create     Capability = "create"
	Delete     Capability = "delete"
	Place      Capability = "place"
	Stop       Capability = "stop"
	Write      Capability = "write"
)

// The values of a rule's policy attribute.
const (
	PolicyDeny  = "deny"  // grants nothing, and takes the resource from every other policy
	PolicyRead  = "read"  // grants Read
	PolicyWrite = "write" // grants every capability of the resource
)

// resources is the one table of what exists; the policy language, the
// ACL and error messages all read it, so adding a capability here is the
// whole change.
var resources = []struct {
	name Resource
	caps []Capability
}{
	{Volume, []Capability{Read, Register, Deregister, Detach, Claim, Create, Delete}},
	{Alloc, []Capability{Read, Place, Stop}},
	{Node, []Capability{Read, Write}},
	// Plugin write admits and revokes controllers (issue 38).
	{Plugin, []Capability{Read, Write}},
	{Operator, []Capability{Read, Write}},
}

// policies lists the policy values in the order error messages give them.
var policies = []string{PolicyDeny, PolicyRead, PolicyWrite}

// Resources lists every resource in a stable order. The slice is the
// caller's own.
func Resources() []Resource {
	out := make([]Resource, len(resources))
	for i, r := range resources {
		out[i] = r.name
	}
	return out
}

// Capabilities lists r's capabilities in a stable order (Read first), or
// nil for an unknown resource. The slice is the caller's own.
func Capabilities(r Resource) []Capability {
	for _, e := range resources {
		if e.name == r {
			return append([]Capability(nil), e.caps...)
		}
	}
	return nil
}

// capIndex is c's position in Capabilities(r), or -1 when r has no such
// capability. The ACL stores grants as bits at these positions.
func capIndex(r Resource, c Capability) int {
	for _, e := range resources {
		if e.name != r {
			continue
		}
		for i, have := range e.caps {
			if have == c {
				return i
			}
		}
		return -1
	}
	return -1
}

// isResource reports whether r is a known resource.
func isResource(r Resource) bool {
	return Capabilities(r) != nil
}
