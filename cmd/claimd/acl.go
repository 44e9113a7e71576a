package main

import (
	"context"
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

// aclBootstrapResetFile is the file in the leader's data dir that allows
// one more bootstrap (endpoints/acl.go, docs/security.md).
const aclBootstrapResetFile = "acl-bootstrap-reset"

var resetIndexRE = regexp.MustCompile(`reset index (\d+)`)

func runACLBootstrap(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl bootstrap", stdout, stderr).jsonFlag("print the token as JSON (with its secret)")
	return x.run(args, atMost(0, "usage: claimd acl bootstrap [-json]"), func(ctx context.Context, c *api.Client, _ []string) int {
		tok, err := c.ACLBootstrap(ctx)
		if errors.Is(err, structs.ErrConflict) {
			return x.fail("acl bootstrap: %v\n%s", err, bootstrapResetHint(err))
		}
		return x.tokenResult("acl bootstrap", tok, err, true)
	})
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
	x := newServerCmd("acl policy apply", stdout, stderr)
	desc := x.fs.String("description", "", "what the policy is for")
	var rules []byte
	check := func(pos []string) error {
		if len(pos) != 2 {
			return errors.New("usage: claimd acl policy apply [-description D] NAME FILE (HCL or JSON rules, or - for stdin)")
		}
		var err error
		rules, err = readPolicyRules(pos[0], pos[1])
		return err
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, pos []string) int {
		idx, err := c.ACLPolicyApply(ctx, pos[0], *desc, string(rules))
		if err != nil {
			return x.fail("acl policy apply: %v", err)
		}
		fmt.Fprintf(stdout, "Policy %q applied (index %d)\n", pos[0], idx)
		return 0
	})
}

// readPolicyRules checks the policy's name and reads and parses its rules
// (path "-": standard input) before any server is asked, so that each
// problem names the file and line the user edits; the server checks again
// (and names the policy).
func readPolicyRules(name, path string) ([]byte, error) {
	if err := structs.ValidateID("NAME", name); err != nil {
		return nil, fmt.Errorf("acl policy apply: %v", err)
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
		return nil, fmt.Errorf("acl policy apply: %v", err)
	}
	if _, err := acl.Parse(path, rules); err != nil {
		var pe *acl.PolicyError
		if errors.As(err, &pe) && len(pe.Problems) > 1 {
			return nil, fmt.Errorf("acl policy apply: %d problems:\n  %s", len(pe.Problems), strings.Join(pe.Problems, "\n  "))
		}
		return nil, fmt.Errorf("acl policy apply: %v", err)
	}
	return rules, nil
}

func runACLPolicyList(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl policy list", stdout, stderr).jsonFlag("print JSON")
	return x.run(args, atMost(0, "usage: claimd acl policy list [-json]"), func(ctx context.Context, c *api.Client, _ []string) int {
		ps, err := c.ACLPolicies(ctx)
		return showList(x, "acl policy list", ps, err, "No policies", printPolicies)
	})
}

// printPolicies is `acl policy list`'s table.
func printPolicies(w io.Writer, ps []*structs.ACLPolicy) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tDescription\tModify Index")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", p.Name, orDash(p.Description), p.ModifyIndex)
	}
	tw.Flush()
}

func runACLPolicyInfo(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl policy info", stdout, stderr).jsonFlag("print JSON")
	return x.run(args, exactly(1, "usage: claimd acl policy info [-json] NAME"), func(ctx context.Context, c *api.Client, pos []string) int {
		p, err := c.ACLPolicy(ctx, pos[0])
		return showOne(x, "acl policy info", p, err, printPolicy)
	})
}

// printPolicy shows a policy as "Key = value" lines, then its rules.
func printPolicy(stdout io.Writer, p *structs.ACLPolicy) {
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
}

func runACLPolicyDelete(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl policy delete", stdout, stderr)
	return x.run(args, exactly(1, "usage: claimd acl policy delete NAME"), func(ctx context.Context, c *api.Client, pos []string) int {
		_, err := c.ACLPolicyDelete(ctx, pos[0])
		return x.done(err, "acl policy delete", "Policy %q deleted\n", pos[0])
	})
}

// stringsFlag collects a repeated flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

func runACLTokenCreate(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl token create", stdout, stderr).jsonFlag("print the token as JSON (with its secret)")
	name := x.fs.String("name", "", "what the token is for (required)")
	typ := x.fs.String("type", structs.ACLTokenClient, "client (what its policies grant) or management (everything)")
	var policies stringsFlag
	x.fs.Var(&policies, "policy", "a policy the token gets (repeatable; a client token needs at least one)")
	ttl := x.fs.Duration("ttl", 0, "how long the token is valid, e.g. 24h (default: no expiry)")
	check := func(pos []string) error {
		if len(pos) > 0 {
			return fmt.Errorf("unexpected argument %q (usage: claimd acl token create -name N [-type client|management] [-policy P]... [-ttl D])", pos[0])
		}
		return checkTokenFlags(*name, *typ, policies, *ttl)
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, _ []string) int {
		tok, err := c.ACLTokenCreate(ctx, *name, *typ, policies, *ttl)
		return x.tokenResult("acl token create", tok, err, true)
	})
}

// checkTokenFlags refuses a token create that the servers would refuse.
func checkTokenFlags(name, typ string, policies []string, ttl time.Duration) error {
	if name == "" {
		return errors.New("-name is required")
	}
	switch typ {
	case structs.ACLTokenClient:
		if len(policies) == 0 {
			return errors.New("a client token needs at least one -policy")
		}
	case structs.ACLTokenManagement:
		if len(policies) > 0 {
			return errors.New("a management token takes no -policy (it may do everything)")
		}
	default:
		return fmt.Errorf("-type: %q is not %s or %s", typ, structs.ACLTokenClient, structs.ACLTokenManagement)
	}
	if ttl < 0 {
		return fmt.Errorf("-ttl: %s is negative", ttl)
	}
	return nil
}

func runACLTokenList(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl token list", stdout, stderr).jsonFlag("print JSON")
	return x.run(args, atMost(0, "usage: claimd acl token list [-json]"), func(ctx context.Context, c *api.Client, _ []string) int {
		toks, err := c.ACLTokens(ctx)
		out := make([]*structs.ACLToken, 0, len(toks))
		for _, t := range toks {
			out = append(out, t.Sanitize())
		}
		return showList(x, "acl token list", out, err, "No tokens", printTokens)
	})
}

// printTokens is `acl token list`'s table (never a secret).
func printTokens(w io.Writer, toks []*structs.ACLToken) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Accessor ID\tName\tType\tPolicies\tExpires")
	for _, t := range toks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.AccessorID, orDash(t.Name), t.Type,
			orDash(strings.Join(t.Policies, ",")), formatExpiry(t.ExpirationTime))
	}
	tw.Flush()
}

func runACLTokenInfo(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl token info", stdout, stderr).jsonFlag("print JSON")
	return x.run(args, exactly(1, "usage: claimd acl token info [-json] ACCESSOR"), func(ctx context.Context, c *api.Client, pos []string) int {
		tok, err := c.ACLToken(ctx, pos[0])
		return x.tokenResult("acl token info", tok, err, false)
	})
}

func runACLTokenSelf(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl token self", stdout, stderr).jsonFlag("print JSON")
	check := func(pos []string) error {
		if len(pos) > 0 {
			return errors.New("usage: claimd acl token self [-json] (the token is -token or $CLAIMD_TOKEN)")
		}
		if api.TokenFromEnv(x.conn.token) == "" {
			return errors.New("no token to show: give -token or set CLAIMD_TOKEN")
		}
		return nil
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, _ []string) int {
		tok, err := c.ACLTokenSelf(ctx)
		return x.tokenResult("acl token self", tok, err, false)
	})
}

func runACLTokenDelete(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("acl token delete", stdout, stderr)
	return x.run(args, exactly(1, "usage: claimd acl token delete ACCESSOR"), func(ctx context.Context, c *api.Client, pos []string) int {
		_, err := c.ACLTokenDelete(ctx, pos[0])
		return x.done(err, "acl token delete", "Token %q deleted\n", pos[0])
	})
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

// tokenResult prints the token a command got, or its error after what:
// with its secret only when withSecret (bootstrap and create, the one time
// it is shown), else as showToken does.
func (x *cmd) tokenResult(what string, tok *structs.ACLToken, err error, withSecret bool) int {
	switch {
	case err != nil:
		return x.fail("%s: %v", what, err)
	case !withSecret:
		return showToken(x.stdout, x.stderr, tok, x.asJSON)
	case x.asJSON:
		return x.json(tok)
	}
	printToken(x.stdout, tok, true)
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
