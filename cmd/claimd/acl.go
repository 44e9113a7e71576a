package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/acl"
	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// ACL commands. A token's secret is printed by `acl bootstrap` and `acl
// token create` only: the servers return it to its creator once and never
// again, and every other command prints tokens without it.

func init() {
	registerCommand("acl bootstrap", "create the first management token (once per cluster)", runACLBootstrap)
	registerCommand("acl policy apply", "create or update an ACL policy from an HCL or JSON file", runACLPolicyApply)
	registerCommand("acl policy list", "list ACL policies", runACLPolicyList)
	registerCommand("acl policy info", "show one ACL policy with its rules", runACLPolicyInfo)
	registerCommand("acl policy delete", "delete an ACL policy", runACLPolicyDelete)
	registerCommand("acl token create", "create an ACL token (its secret is shown this once)", runACLTokenCreate)
	registerCommand("acl token list", "list ACL tokens (without secrets)", runACLTokenList)
	registerCommand("acl token info", "show one ACL token by accessor ID (without its secret)", runACLTokenInfo)
	registerCommand("acl token self", "show the token in use (-token or $CLAIMD_TOKEN)", runACLTokenSelf)
	registerCommand("acl token delete", "delete an ACL token by accessor ID", runACLTokenDelete)
}

// aclBootstrapResetFile is the file in the leader's data dir that allows
// one more bootstrap (endpoints/acl.go, docs/security.md).
const aclBootstrapResetFile = "acl-bootstrap-reset"

var resetIndexRE = regexp.MustCompile(`reset index (\d+)`)

func runACLBootstrap(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl bootstrap", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the token as JSON (with its secret)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		return fail(stderr, "usage: claimd acl bootstrap [-json]")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	tok, err := c.ACLBootstrap(ctx)
	if err != nil {
		if errors.Is(err, structs.ErrConflict) {
			return fail(stderr, "acl bootstrap: %v\n%s", err, bootstrapResetHint(err))
		}
		return fail(stderr, "acl bootstrap: %v", err)
	}
	if *asJSON {
		return jsonOut(stdout, stderr, tok)
	}
	printToken(stdout, tok, true)
	return 0
}

// bootstrapResetHint tells how to bootstrap again when the first
// management token is lost, with the reset index from the server's error.
func bootstrapResetHint(err error) string {
	index := "N (the reset index above)"
	if m := resetIndexRE.FindStringSubmatch(err.Error()); m != nil {
		index = m[1]
	}
	return fmt.Sprintf("The cluster already has a management token. If it is lost, write %s into the file %s\n"+
		"in the leader's data dir and run `claimd acl bootstrap` again; that works once (docs/security.md).",
		index, aclBootstrapResetFile)
}

func runACLPolicyApply(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl policy apply", stderr)
	cf.register(fs)
	desc := fs.String("description", "", "what the policy is for")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 2 {
		return fail(stderr, "usage: claimd acl policy apply [-description D] NAME FILE (HCL or JSON rules, or - for stdin)")
	}
	name, path := fs.Arg(0), fs.Arg(1)
	if err := structs.ValidateID("NAME", name); err != nil {
		return fail(stderr, "acl policy apply: %v", err)
	}
	var rules []byte
	var err error
	if path == "-" {
		rules, err = io.ReadAll(os.Stdin)
		path = "(stdin)"
	} else {
		rules, err = os.ReadFile(path)
	}
	if err != nil {
		return fail(stderr, "acl policy apply: %v", err)
	}
	// Checked here first so that each problem names the file and line the
	// user edits; the server checks again (and names the policy).
	if _, err := acl.Parse(path, rules); err != nil {
		var pe *acl.PolicyError
		if errors.As(err, &pe) && len(pe.Problems) > 1 {
			return fail(stderr, "acl policy apply: %d problems:\n  %s", len(pe.Problems), strings.Join(pe.Problems, "\n  "))
		}
		return fail(stderr, "acl policy apply: %v", err)
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	idx, err := c.ACLPolicyApply(ctx, name, *desc, string(rules))
	if err != nil {
		return fail(stderr, "acl policy apply: %v", err)
	}
	fmt.Fprintf(stdout, "Policy %q applied (index %d)\n", name, idx)
	return 0
}

func runACLPolicyList(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl policy list", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		return fail(stderr, "usage: claimd acl policy list [-json]")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	ps, err := c.ACLPolicies(ctx)
	if err != nil {
		return fail(stderr, "acl policy list: %v", err)
	}
	if *asJSON {
		if ps == nil {
			ps = []*structs.ACLPolicy{}
		}
		return jsonOut(stdout, stderr, ps)
	}
	if len(ps) == 0 {
		fmt.Fprintln(stdout, "No policies")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tDescription\tModify Index")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", p.Name, orDash(p.Description), p.ModifyIndex)
	}
	tw.Flush()
	return 0
}

func runACLPolicyInfo(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl policy info", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd acl policy info [-json] NAME")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	p, err := c.ACLPolicy(ctx, fs.Arg(0))
	if err != nil {
		return fail(stderr, "acl policy info: %v", err)
	}
	if *asJSON {
		return jsonOut(stdout, stderr, p)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Name\t= %s\n", p.Name)
	fmt.Fprintf(tw, "Description\t= %s\n", orDash(p.Description))
	fmt.Fprintf(tw, "Create Index\t= %d\n", p.CreateIndex)
	fmt.Fprintf(tw, "Modify Index\t= %d\n", p.ModifyIndex)
	tw.Flush()
	fmt.Fprintf(stdout, "\nRules\n\n%s", p.Rules)
	if !strings.HasSuffix(p.Rules, "\n") {
		fmt.Fprintln(stdout)
	}
	return 0
}

func runACLPolicyDelete(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl policy delete", stderr)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd acl policy delete NAME")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	if _, err := c.ACLPolicyDelete(ctx, fs.Arg(0)); err != nil {
		return fail(stderr, "acl policy delete: %v", err)
	}
	fmt.Fprintf(stdout, "Policy %q deleted\n", fs.Arg(0))
	return 0
}

// stringsFlag collects a repeated flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

func runACLTokenCreate(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl token create", stderr)
	cf.register(fs)
	name := fs.String("name", "", "what the token is for (required)")
	typ := fs.String("type", structs.ACLTokenClient, "client (what its policies grant) or management (everything)")
	var policies stringsFlag
	fs.Var(&policies, "policy", "a policy the token gets (repeatable; a client token needs at least one)")
	ttl := fs.Duration("ttl", 0, "how long the token is valid, e.g. 24h (default: no expiry)")
	asJSON := fs.Bool("json", false, "print the token as JSON (with its secret)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		return fail(stderr, "unexpected argument %q (usage: claimd acl token create -name N [-type client|management] [-policy P]... [-ttl D])", fs.Arg(0))
	}
	if *name == "" {
		return fail(stderr, "-name is required")
	}
	switch *typ {
	case structs.ACLTokenClient:
		if len(policies) == 0 {
			return fail(stderr, "a client token needs at least one -policy")
		}
	case structs.ACLTokenManagement:
		if len(policies) > 0 {
			return fail(stderr, "a management token takes no -policy (it may do everything)")
		}
	default:
		return fail(stderr, "-type: %q is not %s or %s", *typ, structs.ACLTokenClient, structs.ACLTokenManagement)
	}
	if *ttl < 0 {
		return fail(stderr, "-ttl: %s is negative", *ttl)
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	tok, err := c.ACLTokenCreate(ctx, *name, *typ, policies, *ttl)
	if err != nil {
		return fail(stderr, "acl token create: %v", err)
	}
	if *asJSON {
		return jsonOut(stdout, stderr, tok)
	}
	printToken(stdout, tok, true)
	return 0
}

func runACLTokenList(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl token list", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		return fail(stderr, "usage: claimd acl token list [-json]")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	toks, err := c.ACLTokens(ctx)
	if err != nil {
		return fail(stderr, "acl token list: %v", err)
	}
	out := make([]*structs.ACLToken, 0, len(toks))
	for _, t := range toks {
		out = append(out, t.Sanitize())
	}
	if *asJSON {
		return jsonOut(stdout, stderr, out)
	}
	if len(out) == 0 {
		fmt.Fprintln(stdout, "No tokens")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Accessor ID\tName\tType\tPolicies\tExpires")
	for _, t := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.AccessorID, orDash(t.Name), t.Type,
			orDash(strings.Join(t.Policies, ",")), formatExpiry(t.ExpirationTime))
	}
	tw.Flush()
	return 0
}

func runACLTokenInfo(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl token info", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd acl token info [-json] ACCESSOR")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	tok, err := c.ACLToken(ctx, fs.Arg(0))
	if err != nil {
		return fail(stderr, "acl token info: %v", err)
	}
	return showToken(stdout, stderr, tok, *asJSON)
}

func runACLTokenSelf(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl token self", stderr)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		return fail(stderr, "usage: claimd acl token self [-json] (the token is -token or $CLAIMD_TOKEN)")
	}
	if api.TokenFromEnv(cf.token) == "" {
		return fail(stderr, "no token to show: give -token or set CLAIMD_TOKEN")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	tok, err := c.ACLTokenSelf(ctx)
	if err != nil {
		return fail(stderr, "acl token self: %v", err)
	}
	return showToken(stdout, stderr, tok, *asJSON)
}

func runACLTokenDelete(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("acl token delete", stderr)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd acl token delete ACCESSOR")
	}
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	if _, err := c.ACLTokenDelete(ctx, fs.Arg(0)); err != nil {
		return fail(stderr, "acl token delete: %v", err)
	}
	fmt.Fprintf(stdout, "Token %q deleted\n", fs.Arg(0))
	return 0
}

// showToken prints a token read back from the servers, never its secret
// (they send none; blanked again here so no future reply can leak one).
func showToken(stdout, stderr io.Writer, tok *structs.ACLToken, asJSON bool) int {
	tok = tok.Sanitize()
	if asJSON {
		return jsonOut(stdout, stderr, tok)
	}
	printToken(stdout, tok, false)
	return 0
}

// printToken prints a token as "Key = value" lines; the secret only when
// withSecret (bootstrap and create: the one time it is shown).
func printToken(w io.Writer, t *structs.ACLToken, withSecret bool) {
	if t == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Accessor ID\t= %s\n", t.AccessorID)
	if withSecret {
		fmt.Fprintf(tw, "Secret ID\t= %s\n", t.SecretID)
	}
	fmt.Fprintf(tw, "Name\t= %s\n", orDash(t.Name))
	fmt.Fprintf(tw, "Type\t= %s\n", t.Type)
	fmt.Fprintf(tw, "Policies\t= %s\n", orDash(strings.Join(t.Policies, ",")))
	fmt.Fprintf(tw, "Expires\t= %s\n", formatExpiry(t.ExpirationTime))
	if !t.CreateTime.IsZero() {
		fmt.Fprintf(tw, "Create Time\t= %s\n", t.CreateTime.Local().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "Create Index\t= %d\n", t.CreateIndex)
	fmt.Fprintf(tw, "Modify Index\t= %d\n", t.ModifyIndex)
	tw.Flush()
}

func formatExpiry(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Local().Format(time.RFC3339)
}
