package acl

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
)

// MaxPolicySize bounds a policy's source. A policy that grants everything
// is a few hundred bytes, so a larger source is a mistake, refused before
// it reaches the Raft log. structs.ACLPolicy.Validate holds the same limit.
const MaxPolicySize = 64 << 10

// Rule is what a policy says about one resource.
type Rule struct {
	// Policy is PolicyDeny, PolicyRead, PolicyWrite, or "" when the block
	// sets only capabilities.
	Policy string
	// Capabilities are granted on top of Policy. Parse leaves them in the
	// order Capabilities(r) gives, without repeats, so two policies that
	// grant the same are equal however they were written.
	Capabilities []Capability
}

// Policy is a parsed policy: its rules by resource. A resource without a
// rule is granted nothing by this policy.
type Policy struct {
	Rules map[Resource]Rule
}

// Parse reads a policy written in HCL or JSON; the source is JSON when its
// first non-blank byte is '{'. name identifies the source in error
// messages (a file name, or `policy "ops"`). Empty source is a valid
// policy that grants nothing.
//
// An error from Parse wraps ErrInvalidPolicy and lists every problem
// found, each with the source name, line and columns, and the offending
// word.
func Parse(name string, src []byte) (*Policy, error) {
	if len(src) > MaxPolicySize {
		return nil, invalid([]string{fmt.Sprintf("%s: policy is %d bytes, more than the limit of %d bytes (64 KiB)",
			name, len(src), MaxPolicySize)})
	}
	var (
		file  *hcl.File
		diags hcl.Diagnostics
	)
	if isJSON(src) {
		file, diags = hcljson.Parse(src, name)
	} else {
		file, diags = hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	}
	if diags.HasErrors() {
		return nil, invalid(diagProblems(diags))
	}
	d := &decoder{name: name}
	p := d.policy(file.Body)
	if len(d.problems) > 0 {
		return nil, invalid(d.messages())
	}
	return p, nil
}

// isJSON reports whether src's first non-blank byte is '{'. An HCL policy
// cannot start with '{', so the test is unambiguous.
func isJSON(src []byte) bool {
	for _, b := range src {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b == '{'
	}
	return false
}
