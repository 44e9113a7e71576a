package volspec

import (
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// kind is how a spec key is written in HCL and what JSON it becomes.
type kind int

const (
	kindString       kind = iota // key = "text"
	kindBool                     // key = true
	kindSize                     // key = 1073741824 or key = "1GiB": a number of bytes
	kindStrings                  // key = ["a", "b"]
	kindMap                      // key { any = "text" ... }: a string map
	kindObject                   // key { ...sub... }: one object
	kindCapabilities             // capability { ... } repeated: the "capabilities" list
	kindTopology                 // topology_request { required { topology { segments { ... } } } }
)

// field is one key of a spec as HCL spells it (for capabilities, the
// block's name; its JSON key is "capabilities").
type field struct {
	name string
	kind kind
	sub  []field // kindObject, kindCapabilities
}

var capabilityFields = []field{{"access_mode", kindString, nil}, {"attachment_mode", kindString, nil}}

var mountOptionFields = []field{{"fs_type", kindString, nil}, {"mount_flags", kindStrings, nil}}

// registerFields are structs.Volume's spec keys (what the servers keep
// themselves, claims and history, is not taken from a spec).
var registerFields = []field{
	{"id", kindString, nil}, {"name", kindString, nil}, {"external_id", kindString, nil},
	{"plugin_id", kindString, nil}, {"access_mode", kindString, nil}, {"attachment_mode", kindString, nil},
	{"capability", kindCapabilities, capabilityFields},
	{"mount_options", kindObject, mountOptionFields},
	{"parameters", kindMap, nil}, {"context", kindMap, nil}, {"secrets", kindMap, nil},
	{"capacity", kindSize, nil}, {"node_lost", kindString, nil},
	{"refuse_claims_when_abnormal", kindBool, nil},
}

// createFields are structs.VolumeCreateSpec's keys.
var createFields = []field{
	{"id", kindString, nil}, {"name", kindString, nil}, {"plugin_id", kindString, nil},
	{"capacity_min", kindSize, nil}, {"capacity_max", kindSize, nil},
	{"capability", kindCapabilities, capabilityFields},
	{"mount_options", kindObject, mountOptionFields},
	{"parameters", kindMap, nil}, {"secrets", kindMap, nil},
	{"topology_request", kindTopology, nil},
	{"snapshot_id", kindString, nil}, {"clone_id", kindString, nil},
}

// hclErrors collects "FILE:LINE: KEY: problem" lines.
type hclErrors []string

func (e *hclErrors) add(r hcl.Range, key, format string, args ...any) {
	*e = append(*e, fmt.Sprintf("%s:%d: %s: %s", r.Filename, r.Start.Line, key, fmt.Sprintf(format, args...)))
}

func (e *hclErrors) diags(ds hcl.Diagnostics, key string) {
	for _, d := range ds {
		if d.Severity != hcl.DiagError {
			continue
		}
		where := ""
		if d.Subject != nil {
			where = fmt.Sprintf("%s:%d: ", d.Subject.Filename, d.Subject.Start.Line)
		}
		if key != "" {
			where += key + ": "
		}
		*e = append(*e, where+d.Summary+"; "+d.Detail)
	}
}

func (e hclErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(e, "\n"))
}

// hclToJSON maps an HCL spec onto the JSON shape the API types decode.
// A register spec's one capability block becomes its access_mode and
// attachment_mode.
func hclToJSON(name string, data []byte, fields []field, register bool) ([]byte, error) {
	file, ds := hclsyntax.ParseConfig(data, name, hcl.Pos{Line: 1, Column: 1})
	var errs hclErrors
	if ds.HasErrors() {
		errs.diags(ds, "")
		return nil, errs.err()
	}
	out := decodeBody(file.Body, fields, "", &errs)
	if register {
		if caps, ok := out["capabilities"].([]any); ok {
			delete(out, "capabilities")
			if len(caps) != 1 {
				errs = append(errs, fmt.Sprintf("%s: capability: a registered volume has one access and attachment mode; give one capability block, not %d", name, len(caps)))
			} else if _, dup := out["access_mode"]; dup {
				errs = append(errs, fmt.Sprintf("%s: capability: give access_mode and attachment_mode in a capability block or at the top level, not both", name))
			} else {
				c := caps[0].(map[string]any)
				out["access_mode"], out["attachment_mode"] = c["access_mode"], c["attachment_mode"]
			}
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// decodeBody decodes one body against its fields; path prefixes the keys
// errors name ("mount_options.fs_type").
func decodeBody(body hcl.Body, fields []field, path string, errs *hclErrors) map[string]any {
	schema := &hcl.BodySchema{}
	for _, f := range fields {
		switch f.kind {
		case kindMap, kindObject, kindCapabilities, kindTopology:
			schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: f.name})
		default:
			schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: f.name})
		}
	}
	content, ds := body.Content(schema)
	errs.diags(ds, strings.TrimSuffix(path, "."))
	out := map[string]any{}
	for _, f := range fields {
		key := path + f.name
		switch f.kind {
		case kindString, kindBool, kindSize, kindStrings:
			if a, ok := content.Attributes[f.name]; ok {
				if v, ok := attrValue(a, f.kind, key, errs); ok {
					out[f.name] = v
				}
			}
		case kindCapabilities:
			var caps []any
			for _, b := range blocksOf(content, f.name) {
				caps = append(caps, decodeBody(b.Body, f.sub, key+".", errs))
			}
			if caps != nil {
				out["capabilities"] = caps
			}
		default:
			blocks := blocksOf(content, f.name)
			if len(blocks) > 1 {
				errs.add(blocks[1].DefRange, key, "given twice (first at line %d)", blocks[0].DefRange.Start.Line)
				continue
			}
			if len(blocks) == 0 {
				continue
			}
			switch f.kind {
			case kindMap:
				out[f.name] = stringMap(blocks[0].Body, key, errs)
			case kindObject:
				out[f.name] = decodeBody(blocks[0].Body, f.sub, key+".", errs)
			case kindTopology:
				out[f.name] = topologyRequest(blocks[0].Body, key, errs)
			}
		}
	}
	return out
}

func blocksOf(content *hcl.BodyContent, typ string) []*hcl.Block {
	var out []*hcl.Block
	for _, b := range content.Blocks {
		if b.Type == typ {
			if len(b.Labels) > 0 {
				continue // the schema has no labels; HCL has said so
			}
			out = append(out, b)
		}
	}
	return out
}

// attrValue evaluates a literal attribute as its kind wants it.
func attrValue(a *hcl.Attribute, k kind, key string, errs *hclErrors) (any, bool) {
	// A bare word (x = yes) would be evaluated as a variable, and HCL would
	// answer "Variables not allowed": say what the key wants.
	if word, ok := BareWord(a.Expr); ok {
		want := map[kind]string{kindString: "a string in quotes", kindBool: "true or false",
			kindSize: "a size (bytes, or a string like \"10GiB\")", kindStrings: "a list of strings"}[k]
		errs.add(a.Range, key, "want %s, got the bare word %s (a string needs quotes)", want, word)
		return nil, false
	}
	v, ds := a.Expr.Value(nil)
	if ds.HasErrors() {
		errs.diags(ds, key)
		return nil, false
	}
	if v.IsNull() || !v.IsKnown() {
		errs.add(a.Range, key, "must have a value")
		return nil, false
	}
	switch k {
	case kindString:
		if v.Type() != cty.String {
			errs.add(a.Range, key, "want a string in quotes, got %s", v.Type().FriendlyName())
			return nil, false
		}
		return v.AsString(), true
	case kindBool:
		if v.Type() != cty.Bool {
			errs.add(a.Range, key, "want true or false, got %s", describe(v))
			return nil, false
		}
		return v.True(), true
	case kindSize:
		switch v.Type() {
		case cty.String:
			n, err := ParseSize(v.AsString())
			if err != nil {
				errs.add(a.Range, key, "%v", err)
				return nil, false
			}
			return n, true
		case cty.Number:
			bf := v.AsBigFloat()
			n, acc := bf.Int64()
			if acc != big.Exact || n <= 0 {
				errs.add(a.Range, key, "%s is not a positive whole number of bytes", bf.Text('g', -1))
				return nil, false
			}
			return n, true
		}
		errs.add(a.Range, key, "want a size (bytes, or a string like \"10GiB\"), got %s", v.Type().FriendlyName())
		return nil, false
	case kindStrings:
		if !v.Type().IsListType() && !v.Type().IsTupleType() {
			errs.add(a.Range, key, "want a list of strings, got %s", v.Type().FriendlyName())
			return nil, false
		}
		var out []string
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if e.Type() != cty.String || e.IsNull() {
				errs.add(a.Range, key, "want a list of strings, got an element of %s", e.Type().FriendlyName())
				return nil, false
			}
			out = append(out, e.AsString())
		}
		return out, true
	}
	return nil, false
}

// describe names a wrong value the way the operator wrote it.
func describe(v cty.Value) string {
	if v.Type() == cty.String {
		return fmt.Sprintf("the string %q", v.AsString())
	}
	return v.Type().FriendlyName()
}

// stringMap decodes a block of free keys, each a string.
func stringMap(body hcl.Body, key string, errs *hclErrors) map[string]string {
	attrs, ds := body.JustAttributes()
	errs.diags(ds, key)
	out := map[string]string{}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if v, ok := attrValue(attrs[n], kindString, key+"."+n, errs); ok {
			out[n] = v.(string)
		}
	}
	return out
}

// topologyRequest decodes Nomad's shape:
//
//	topology_request {
//	  required  { topology { segments { zone = "a" } } }
//	  preferred { topology { segments { zone = "b" } } }
//	}
//
// into {"required": [{"zone": "a"}], "preferred": [{"zone": "b"}]}.
func topologyRequest(body hcl.Body, key string, errs *hclErrors) map[string]any {
	content, ds := body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "required"}, {Type: "preferred"}}})
	errs.diags(ds, key)
	out := map[string]any{}
	for _, kindName := range []string{"required", "preferred"} {
		var sets []map[string]string
		for _, b := range blocksOf(content, kindName) {
			inner, ds := b.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "topology"}}})
			errs.diags(ds, key+"."+kindName)
			for _, t := range blocksOf(inner, "topology") {
				seg, ds := t.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "segments"}}})
				errs.diags(ds, key+"."+kindName+".topology")
				segs := blocksOf(seg, "segments")
				if len(segs) != 1 {
					errs.add(t.DefRange, key+"."+kindName+".topology", "want one segments block, got %d", len(segs))
					continue
				}
				sets = append(sets, stringMap(segs[0].Body, key+"."+kindName+".topology.segments", errs))
			}
		}
		if sets != nil {
			out[kindName] = sets
		}
	}
	return out
}

// BareWord reports an HCL value written as a single unquoted word
// (enabled = yes): HCL would evaluate it as a variable and answer
// "Variables not allowed", which says nothing of what the key wants.
// true, false and null are values, not bare words. The agent's
// configuration reader uses it too.
func BareWord(expr hcl.Expression) (string, bool) {
	tr, ok := expr.(*hclsyntax.ScopeTraversalExpr)
	if !ok || len(tr.Traversal) != 1 {
		return "", false
	}
	switch w := tr.Traversal.RootName(); w {
	case "true", "false", "null":
		return "", false
	default:
		return w, true
	}
}
