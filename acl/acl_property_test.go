package acl

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// genPolicy draws a policy with a random rule on a random subset of
// resources. With parseable false the rules may also hold what Parse
// refuses (another resource's capabilities, capabilities beside deny),
// which New must ignore rather than grant.
func genPolicy(parseable bool) *rapid.Generator[*Policy] {
	return rapid.Custom(func(t *rapid.T) *Policy {
		p := &Policy{Rules: make(map[Resource]Rule)}
		for _, r := range Resources() {
			if !rapid.Bool().Draw(t, "has "+string(r)) {
				continue
			}
			rule := Rule{Policy: rapid.SampledFrom([]string{"", PolicyDeny, PolicyRead, PolicyWrite}).Draw(t, string(r)+" policy")}
			pool := Capabilities(r)
			if !parseable {
				pool = allCapabilities()
			}
			if parseable && rule.Policy == PolicyDeny {
				pool = nil
			}
			if len(pool) > 0 {
				rule.Capabilities = rapid.SliceOfN(rapid.SampledFrom(pool), 0, 4).Draw(t, string(r)+" capabilities")
			}
			p.Rules[r] = rule
		}
		return p
	})
}

// grantedBy is the model: what one rule grants, read straight off the
// language's definition.
func grantedBy(p *Policy, r Resource, c Capability) bool {
	rule, ok := p.Rules[r]
	if !ok || rule.Policy == PolicyDeny || !slices.Contains(Capabilities(r), c) {
		return false
	}
	return rule.Policy == PolicyWrite ||
		(rule.Policy == PolicyRead && c == Read) ||
		slices.Contains(rule.Capabilities, c)
}

func TestNew_AllowsWhatSomePolicyGrantsUnlessAnyDenies(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ps := rapid.SliceOfN(genPolicy(false), 1, 4).Draw(t, "policies")
		a := New(ps...)
		for _, r := range Resources() {
			denied := false
			for _, p := range ps {
				denied = denied || p.Rules[r].Policy == PolicyDeny
			}
			for _, c := range allCapabilities() {
				granted := false
				for _, p := range ps {
					granted = granted || grantedBy(p, r, c)
				}
				if exp := granted && !denied; a.Allow(r, c) != exp {
					t.Fatalf("Allow(%s, %s): exp: %v got: %v (acl %s)", r, c, exp, !exp, a)
				}
			}
		}
	})
}

// canonical is p as Parse returns it: capabilities in Capabilities(r)
// order without repeats, nil when none.
func canonical(p *Policy) *Policy {
	out := &Policy{Rules: make(map[Resource]Rule)}
	for r, rule := range p.Rules {
		var caps []Capability
		for _, c := range Capabilities(r) {
			if slices.Contains(rule.Capabilities, c) {
				caps = append(caps, c)
			}
		}
		out.Rules[r] = Rule{Policy: rule.Policy, Capabilities: caps}
	}
	return out
}

// renderHCL writes p in the native syntax. A rule without a policy always
// gets a capabilities attribute, possibly empty, so no block is empty.
func renderHCL(p *Policy) string {
	var b strings.Builder
	for _, r := range Resources() {
		rule, ok := p.Rules[r]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "%s {\n", r)
		if rule.Policy != "" {
			fmt.Fprintf(&b, "  policy = %q\n", rule.Policy)
		}
		if rule.Policy == "" || len(rule.Capabilities) > 0 {
			quoted := make([]string, len(rule.Capabilities))
			for i, c := range rule.Capabilities {
				quoted[i] = fmt.Sprintf("%q", c)
			}
			fmt.Fprintf(&b, "  capabilities = [%s]\n", strings.Join(quoted, ", "))
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func renderJSON(p *Policy) string {
	doc := make(map[Resource]map[string]any)
	for r, rule := range p.Rules {
		block := make(map[string]any)
		if rule.Policy != "" {
			block["policy"] = rule.Policy
		}
		if rule.Policy == "" || len(rule.Capabilities) > 0 {
			block["capabilities"] = append([]Capability{}, rule.Capabilities...)
		}
		doc[r] = block
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err)
	}
	return string(out)
}

func TestParse_ReadsBackAnyPolicyWrittenInHCLOrJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(true).Draw(t, "policy")
		exp := canonical(p)
		for name, src := range map[string]string{"p.hcl": renderHCL(p), "p.json": renderJSON(p)} {
			got, err := Parse(name, []byte(src))
			if err != nil {
				t.Fatalf("Parse(%s):\n%s\nexp: no error got: %v", name, src, err)
			}
			if !reflect.DeepEqual(got, exp) {
				t.Fatalf("Parse(%s):\n%s\nexp: %+v got: %+v", name, src, exp.Rules, got.Rules)
			}
		}
	})
}
