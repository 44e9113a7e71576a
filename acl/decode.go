package acl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// The attributes of a resource block.
const (
	attrPolicy       = "policy"
	attrCapabilities = "capabilities"
)

var (
	policySchema = func() *hcl.BodySchema {
		s := &hcl.BodySchema{}
		for _, r := range Resources() {
			s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: string(r)})
		}
		return s
	}()
	ruleSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: attrPolicy},
		{Name: attrCapabilities},
	}}
)

// decoder turns a parsed HCL or JSON body into a Policy. It goes through
// hcl's format-neutral Body interface, so both syntaxes share one set of
// checks and one set of messages, and it collects every problem instead of
// stopping at the first.
type decoder struct {
	name     string
	problems []problem
}

// problem is one message and where it starts, so that messages can be
// given in source order whichever check found them.
type problem struct {
	at  int // byte offset in the source
	msg string
}

// misfit is a name in a body that its schema does not declare, or declares
// as the other kind (an attribute where a block belongs, or the reverse).
type misfit struct {
	name  string
	rng   hcl.Range
	block bool
}

func (d *decoder) addf(rng hcl.Range, format string, args ...any) {
	d.problems = append(d.problems, problem{rng.Start.Byte, rng.String() + ": " + fmt.Sprintf(format, args...)})
}

// addDiags records hcl's error diagnostics and reports whether there were
// any.
func (d *decoder) addDiags(diags hcl.Diagnostics) bool {
	for _, diag := range diags {
		if diag.Severity != hcl.DiagError {
			continue
		}
		at := 0
		if diag.Subject != nil {
			at = diag.Subject.Start.Byte
		}
		d.problems = append(d.problems, problem{at, diag.Error()})
	}
	return diags.HasErrors()
}

// messages returns the problems in source order.
func (d *decoder) messages() []string {
	slices.SortStableFunc(d.problems, func(a, b problem) int { return a.at - b.at })
	out := make([]string, len(d.problems))
	for i, p := range d.problems {
		out[i] = p.msg
	}
	return out
}

// policy decodes the top level: one block per resource, each at most once.
func (d *decoder) policy(body hcl.Body) *Policy {
	p := &Policy{Rules: make(map[Resource]Rule)}
	content := d.content(body, policySchema, func(m misfit) {
		if isResource(Resource(m.name)) {
			d.addf(m.rng, "%s must be a block, as in %s { policy = \"read\" }", m.name, m.name)
			return
		}
		d.addf(m.rng, "unknown block %q (one of %s)", m.name, joinList(Resources()))
	})
	firstLine := make(map[Resource]int)
	for _, blk := range content.Blocks {
		r := Resource(blk.Type)
		rule, ok := d.rule(r, blk) // a duplicate too, to report its own problems
		if line, dup := firstLine[r]; dup {
			d.addf(blk.TypeRange, "duplicate %s block (the first is at line %d)", r, line)
			continue
		}
		firstLine[r] = blk.TypeRange.Start.Line
		if ok {
			p.Rules[r] = rule
		}
	}
	return p
}

// rule decodes one resource block.
func (d *decoder) rule(r Resource, blk *hcl.Block) (Rule, bool) {
	misfits := 0
	content := d.content(blk.Body, ruleSchema, func(m misfit) {
		misfits++
		if m.block && (m.name == attrPolicy || m.name == attrCapabilities) {
			d.addf(m.rng, "%s in a %s block must be an attribute, as in %s = ...", m.name, r, m.name)
			return
		}
		d.addf(m.rng, "unknown %s attribute %q (one of %s, %s)", r, m.name, attrPolicy, attrCapabilities)
	})
	policyAttr, hasPolicy := content.Attributes[attrPolicy]
	capsAttr, hasCaps := content.Attributes[attrCapabilities]
	if !hasPolicy && !hasCaps {
		// A misspelt attribute already explains why the block is empty.
		if misfits == 0 {
			d.problems = append(d.problems, problem{blk.TypeRange.Start.Byte,
				fmt.Sprintf("%s: %s block at line %d: set policy or capabilities", d.name, r, blk.TypeRange.Start.Line)})
		}
		return Rule{}, false
	}

	var rule Rule
	ok := misfits == 0
	if hasPolicy {
		s, good := d.str(policyAttr.Expr, attrPolicy)
		switch {
		case !good:
			ok = false
		case !slices.Contains(policies, s):
			d.addf(policyAttr.Expr.Range(), "unknown %s policy %q (one of %s)", r, s, strings.Join(policies, ", "))
			ok = false
		default:
			rule.Policy = s
		}
	}
	if hasCaps {
		caps, good := d.capabilities(r, capsAttr.Expr)
		ok = ok && good
		rule.Capabilities = caps
		// deny grants nothing and takes the resource away, so capabilities
		// beside it can only be a misunderstanding; refuse rather than
		// silently ignore them.
		if rule.Policy == PolicyDeny {
			d.addf(capsAttr.NameRange, "%s block sets capabilities with policy %q, which grants nothing; remove one", r, PolicyDeny)
			ok = false
		}
	}
	return rule, ok
}

// capabilities decodes a list of r's capability names into r's canonical
// order without repeats.
func (d *decoder) capabilities(r Resource, expr hcl.Expression) ([]Capability, bool) {
	elems, diags := hcl.ExprList(expr)
	if diags.HasErrors() {
		// hcl's "A static list expression is required" does not show the
		// shape wanted.
		d.addf(expr.Range(), "%s must be a list of quoted names, as in [%q]", attrCapabilities, Read)
		return nil, false
	}
	ok := true
	var bits uint16
	for _, elem := range elems {
		s, good := d.str(elem, "a capability")
		if !good {
			ok = false
			continue
		}
		bit := capBit(r, Capability(s))
		if bit == 0 {
			d.addf(elem.Range(), "unknown %s capability %q (one of %s)", r, s, joinList(Capabilities(r)))
			ok = false
			continue
		}
		bits |= bit
	}
	var caps []Capability
	for i, c := range Capabilities(r) {
		if bits&(1<<i) != 0 {
			caps = append(caps, c)
		}
	}
	return caps, ok
}

// str evaluates expr, which must be a literal string: a policy has no
// variables or functions.
func (d *decoder) str(expr hcl.Expression, what string) (string, bool) {
	// A bare word (policy = read) would otherwise get hcl's "Variables not
	// allowed", which does not say what to write instead.
	if t, ok := expr.(*hclsyntax.ScopeTraversalExpr); ok && len(t.Traversal) == 1 {
		d.addf(expr.Range(), "%s must be a quoted string, as in \"%s\"", what, t.Traversal.RootName())
		return "", false
	}
	v, diags := expr.Value(nil)
	if d.addDiags(diags) {
		return "", false
	}
	if !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		d.addf(expr.Range(), "%s must be a string", what)
		return "", false
	}
	return v.AsString(), true
}

// content returns what body holds of schema and calls misfit for each
// name in body that schema does not declare, in source order.
//
// hcl's own Content reports those too, but with its wording ("Unsupported
// block type") and without the list of valid names; PartialContent plus
// this walk lets every message name the bad word and its alternatives.
// The native syntax keeps its AST, so its attributes and blocks are walked
// directly; JSON has no AST to walk, but its leftover properties (all
// JSON properties read as attributes) are what JustAttributes returns from
// the remaining body.
func (d *decoder) content(body hcl.Body, schema *hcl.BodySchema, report func(misfit)) *hcl.BodyContent {
	content, remain, diags := body.PartialContent(schema)
	d.addDiags(diags)
	var misfits []misfit
	switch b := body.(type) {
	case *hclsyntax.Body:
		for _, a := range b.Attributes {
			if !slices.ContainsFunc(schema.Attributes, func(s hcl.AttributeSchema) bool { return s.Name == a.Name }) {
				misfits = append(misfits, misfit{a.Name, a.NameRange, false})
			}
		}
		for _, blk := range b.Blocks {
			if !slices.ContainsFunc(schema.Blocks, func(s hcl.BlockHeaderSchema) bool { return s.Type == blk.Type }) {
				misfits = append(misfits, misfit{blk.Type, blk.TypeRange, true})
			}
		}
	default:
		attrs, diags := remain.JustAttributes()
		d.addDiags(diags)
		for _, a := range attrs {
			misfits = append(misfits, misfit{a.Name, a.NameRange, false})
		}
	}
	slices.SortFunc(misfits, func(a, b misfit) int { return a.rng.Start.Byte - b.rng.Start.Byte })
	for _, m := range misfits {
		report(m)
	}
	return content
}

// joinList writes names as "a, b, c" for error messages.
func joinList[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
