package acl

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// allCapabilities is every capability name of every resource, once each,
// so tests can also ask about a capability the resource does not have.
func allCapabilities() []Capability {
	var out []Capability
	for _, r := range Resources() {
		for _, c := range Capabilities(r) {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// checkAllows compares a.Allow with exp for every resource and every
// capability name; exp lists the allowed pairs as "resource:capability".
func checkAllows(t *testing.T, a *ACL, exp ...string) {
	t.Helper()
	for _, r := range Resources() {
		for _, c := range allCapabilities() {
			want := slices.Contains(exp, fmt.Sprintf("%s:%s", r, c))
			if got := a.Allow(r, c); got != want {
				t.Errorf("Allow(%s, %s): exp: %v got: %v (acl %s)", r, c, want, got, a)
			}
		}
	}
}

func TestAllow_ReadPolicyGrantsOnlyRead(t *testing.T) {
	for _, r := range Resources() {
		t.Run(string(r), func(t *testing.T) {
			p := &Policy{Rules: map[Resource]Rule{r: {Policy: PolicyRead}}}
			checkAllows(t, New(p), string(r)+":read")
		})
	}
}

func TestAllow_WritePolicyGrantsEveryCapabilityOfTheResource(t *testing.T) {
	for _, r := range Resources() {
		t.Run(string(r), func(t *testing.T) {
			p := &Policy{Rules: map[Resource]Rule{r: {Policy: PolicyWrite}}}
			var exp []string
			for _, c := range Capabilities(r) {
				exp = append(exp, fmt.Sprintf("%s:%s", r, c))
			}
			checkAllows(t, New(p), exp...)
		})
	}
}

func TestAllow_NodeWritePolicyGrantsReadAndWrite(t *testing.T) {
	a := New(mustParse(t, "node.hcl", `node { policy = "write" }`))
	checkAllows(t, a, "node:read", "node:write")
}

func TestAllow_CapabilityListAddsToThePolicy(t *testing.T) {
	a := New(mustParse(t, "p.hcl", `
volume {
  policy       = "read"
  capabilities = ["detach", "claim"]
}
alloc { capabilities = ["stop"] }
`))
	checkAllows(t, a, "volume:read", "volume:detach", "volume:claim", "alloc:stop")
}

func TestAllow_PoliciesOnOneTokenAreUnited(t *testing.T) {
	a := New(
		mustParse(t, "a.hcl", `volume { capabilities = ["register"] }`),
		mustParse(t, "b.hcl", `volume { policy = "read" }
plugin { policy = "read" }`),
	)
	checkAllows(t, a, "volume:read", "volume:register", "plugin:read")
}

func TestAllow_DenyBeatsAnotherPolicysWrite(t *testing.T) {
	write := mustParse(t, "write.hcl", `volume { policy = "write" }
node { policy = "write" }`)
	deny := mustParse(t, "deny.hcl", `volume { policy = "deny" }`)
	// Deny wins in either order; the other resource is untouched.
	for _, a := range []*ACL{New(write, deny), New(deny, write)} {
		checkAllows(t, a, "node:read", "node:write")
	}
}

func TestNew_WithNoPoliciesDeniesAll(t *testing.T) {
	checkAllows(t, New())
	checkAllows(t, DenyAll)
	checkAllows(t, New(nil, &Policy{}))
	if DenyAll.IsManagement() {
		t.Fatalf("exp: DenyAll not management got: management")
	}
}

func TestNew_IgnoresWhatParseWouldRefuse(t *testing.T) {
	// A hand-built policy never grants more than a parsed one could.
	p := &Policy{Rules: map[Resource]Rule{
		Volume:           {Policy: "Write", Capabilities: []Capability{Place, Write, "detatch"}},
		Resource("disk"): {Policy: PolicyWrite},
	}}
	a := New(p)
	checkAllows(t, a)
	if a.Allow("disk", Read) {
		t.Fatalf("exp: unknown resource denied got: allowed")
	}
}

func TestAllow_WritePolicyDoesNotGrantAnotherResourcesCapability(t *testing.T) {
	a := New(mustParse(t, "p.hcl", `volume { policy = "write" }`))
	for _, c := range []Capability{Place, Stop, Write} {
		if a.Allow(Volume, c) {
			t.Errorf("Allow(volume, %s): exp: false got: true", c)
		}
	}
}

func TestManagement_AllowsEverything(t *testing.T) {
	a := Management()
	if !a.IsManagement() {
		t.Fatalf("exp: IsManagement got: false")
	}
	for _, r := range Resources() {
		for _, c := range allCapabilities() {
			if !a.Allow(r, c) {
				t.Errorf("Allow(%s, %s): exp: true got: false", r, c)
			}
		}
	}
}

func TestNilACL_MeansACLsDisabledAndAllowsEverything(t *testing.T) {
	var a *ACL
	for _, r := range Resources() {
		for _, c := range allCapabilities() {
			if !a.Allow(r, c) {
				t.Errorf("Allow(%s, %s): exp: true got: false", r, c)
			}
		}
	}
	if a.IsManagement() {
		t.Fatalf("exp: nil ACL not management got: management")
	}
	if got := a.String(); got != "disabled" {
		t.Fatalf("exp: disabled got: %q", got)
	}
}

func TestString_ListsGrantsInStableOrder(t *testing.T) {
	cases := []struct {
		name string
		acl  *ACL
		exp  string
	}{
		{"management", Management(), "management"},
		{"deny all", DenyAll, "none"},
		{"grants", New(mustParse(t, "p.hcl", `
operator { policy = "deny" }
alloc    { policy = "read" }
volume   { capabilities = ["detach", "read"] }
`), mustParse(t, "q.hcl", `operator { policy = "write" }`)), "volume:read,detach alloc:read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.acl.String(); got != tc.exp {
				t.Fatalf("exp: %q got: %q", tc.exp, got)
			}
		})
	}
}

func TestCapabilities_ReturnsACopyInStableOrder(t *testing.T) {
	exp := []Capability{Read, Register, Deregister, Detach, Claim, Create, Delete}
	got := Capabilities(Volume)
	if !slices.Equal(got, exp) {
		t.Fatalf("exp: %v got: %v", exp, got)
	}
	got[0] = "scribble"
	if Capabilities(Volume)[0] != Read {
		t.Fatalf("exp: callers cannot change the table got: %v", Capabilities(Volume))
	}
	if Capabilities("disk") != nil {
		t.Fatalf("exp: nil for an unknown resource got: %v", Capabilities("disk"))
	}
	if exp := []Resource{Volume, Alloc, Node, Plugin, Operator}; !slices.Equal(Resources(), exp) {
		t.Fatalf("exp: %v got: %v", exp, Resources())
	}
}

func TestACL_IsSafeForConcurrentUse(t *testing.T) {
	a := New(mustParse(t, "p.hcl", `volume { policy = "write" }`))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if !a.Allow(Volume, Claim) || a.Allow(Alloc, Read) {
					t.Error("exp: volume:claim only got: other")
					return
				}
				_ = a.String()
			}
		})
	}
	wg.Wait()
}
