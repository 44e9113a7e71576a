package acl

import (
	"errors"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// ErrInvalidPolicy is wrapped by every error Parse returns, so an endpoint
// can tell a bad policy (the caller's mistake) from a failure of its own
// with errors.Is.
var ErrInvalidPolicy = errors.New("invalid ACL policy")

// PolicyError lists every problem Parse found in one source, in source
// order, so a writer fixes a policy in one round instead of one error per
// attempt. Each problem starts with its position: `name:line,col-col: `.
type PolicyError struct {
	Problems []string
}

// Error joins the problems on one line; RPC errors and log lines are one
// line each.
func (e *PolicyError) Error() string { return strings.Join(e.Problems, "; ") }

// Unwrap makes errors.Is(err, ErrInvalidPolicy) true.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

func invalid(problems []string) error { return &PolicyError{Problems: problems} }

// diagProblems turns hcl's error diagnostics (syntax errors and the like,
// which already carry a position) into problems. Warnings are dropped:
// hcl emits none that matter for a policy.
func diagProblems(diags hcl.Diagnostics) []string {
	var out []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			out = append(out, d.Error())
		}
	}
	return out
}
