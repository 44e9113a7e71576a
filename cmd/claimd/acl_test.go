package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

func TestACLCommands_Registered(t *testing.T) {
	_, _, usageOut := runCLI("no-such-command")
	for _, name := range []string{"acl bootstrap", "acl policy apply", "acl policy list", "acl policy info",
		"acl policy delete", "acl token create", "acl token list", "acl token info", "acl token self", "acl token delete"} {
		if !strings.Contains(usageOut, "  "+name+" ") {
			t.Fatalf("usage exp: %q listed got: %s", name, usageOut)
		}
	}
}

// The errors below are found before any server is contacted: -address
// points at a port nothing listens on, so a command that got as far as
// dialling would fail with a different error than the one expected.
func TestACLCommands_UsageErrorsNeedNoServer(t *testing.T) {
	t.Setenv("CLAIMD_TOKEN", "")
	t.Setenv("CLAIMD_CACERT", "")
	dir := t.TempDir()
	badHCL := filepath.Join(dir, "ops.hcl")
	if err := os.WriteFile(badHCL, []byte("volume {\n  policy = \"read\"\n}\nvolumes {\n  policy = \"write\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCap := filepath.Join(dir, "caps.json")
	if err := os.WriteFile(badCap, []byte(`{"volume": {"capabilities": ["read", "fly"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	noServer := []string{"-address", "127.0.0.1:1", "-timeout", "1s"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bootstrap extra arg", []string{"acl", "bootstrap", "now"}, "usage: claimd acl bootstrap"},
		{"policy apply no args", []string{"acl", "policy", "apply"}, "usage: claimd acl policy apply"},
		{"policy apply missing FILE", []string{"acl", "policy", "apply", "ops"}, "usage: claimd acl policy apply"},
		{"policy apply bad name", []string{"acl", "policy", "apply", "-ops", badHCL}, "flag provided but not defined: -ops"},
		{"policy apply bad name chars", []string{"acl", "policy", "apply", "ops/1", badHCL}, "NAME"},
		{"policy apply missing file", []string{"acl", "policy", "apply", "ops", filepath.Join(dir, "nope.hcl")}, "nope.hcl"},
		{"policy apply bad HCL names file and line", []string{"acl", "policy", "apply", "ops", badHCL}, badHCL + ":4,"},
		{"policy apply bad capability names file", []string{"acl", "policy", "apply", "ops", badCap}, badCap + ":1,"},
		{"policy info no NAME", []string{"acl", "policy", "info"}, "usage: claimd acl policy info"},
		{"policy delete no NAME", []string{"acl", "policy", "delete"}, "usage: claimd acl policy delete"},
		{"policy list extra arg", []string{"acl", "policy", "list", "ops"}, "usage: claimd acl policy list"},
		{"token create no name", []string{"acl", "token", "create", "-policy", "ops"}, "-name is required"},
		{"token create bogus type", []string{"acl", "token", "create", "-name", "x", "-type", "bogus"}, `-type: "bogus" is not client or management`},
		{"token create client without policy", []string{"acl", "token", "create", "-name", "x"}, "at least one -policy"},
		{"token create management with policy", []string{"acl", "token", "create", "-name", "x", "-type", "management", "-policy", "ops"}, "takes no -policy"},
		{"token create negative ttl", []string{"acl", "token", "create", "-name", "x", "-policy", "ops", "-ttl", "-1h"}, "-ttl"},
		{"token create bad ttl", []string{"acl", "token", "create", "-name", "x", "-policy", "ops", "-ttl", "tomorrow"}, "invalid value \"tomorrow\" for flag -ttl"},
		{"token create positional", []string{"acl", "token", "create", "-name", "x", "-policy", "ops", "extra"}, `unexpected argument "extra"`},
		{"token info no ACCESSOR", []string{"acl", "token", "info"}, "usage: claimd acl token info"},
		{"token delete no ACCESSOR", []string{"acl", "token", "delete"}, "usage: claimd acl token delete"},
		{"token delete two", []string{"acl", "token", "delete", "a", "b"}, "usage: claimd acl token delete"},
		{"token self without token", []string{"acl", "token", "self"}, "give -token or set CLAIMD_TOKEN"},
		{"token list extra arg", []string{"acl", "token", "list", "x"}, "usage: claimd acl token list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Flags go before positional arguments (Go's flag package).
			args := append(append(append([]string(nil), tc.args[:3]...), noServer...), tc.args[3:]...)
			if tc.args[1] == "bootstrap" {
				args = append(append([]string{"acl", "bootstrap"}, noServer...), tc.args[2:]...)
			}
			code, out, errOut := runCLI(args...)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("claimd %s exp: exit 1 with %q got: %d %q", strings.Join(args, " "), tc.want, code, errOut)
			}
			if out != "" {
				t.Fatalf("exp: nothing on stdout got: %q", out)
			}
		})
	}
}

func TestACLPolicyApply_ReportsEveryProblemWithLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.hcl")
	src := "volume {\n  policy = \"reed\"\n}\nalloc {\n  capabilities = [\"fly\"]\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI("acl", "policy", "apply", "-address", "127.0.0.1:1", "-timeout", "1s", "ops", path)
	if code != 1 {
		t.Fatalf("exp: exit 1 got: %d", code)
	}
	for _, want := range []string{path + ":2,", "reed", path + ":5,", "fly"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("exp: %q in %q", want, errOut)
		}
	}
}

func TestBootstrapResetHint_NamesIndexAndFile(t *testing.T) {
	err := structs.NewError(structs.CodeConflict, "ACL bootstrap already done (reset index 42)")
	hint := bootstrapResetHint(err)
	for _, want := range []string{"42", "acl-bootstrap-reset", "leader's data dir"} {
		if !strings.Contains(hint, want) {
			t.Fatalf("exp: %q in %q", want, hint)
		}
	}
	// Without an index in the message the hint still says what to write.
	if hint := bootstrapResetHint(structs.ErrConflict); !strings.Contains(hint, "reset index") {
		t.Fatalf("exp: a pointer to the reset index got: %q", hint)
	}
}

func TestPrintToken_SecretOnlyWhenAsked(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := &structs.ACLToken{AccessorID: "acc-1", SecretID: "s3cr3t-value-never-shown-aaaaaaaaaaa", Name: "ops",
		Type: structs.ACLTokenClient, Policies: []string{"ops", "read"}, ExpirationTime: &exp, CreateIndex: 7, ModifyIndex: 7}
	var withSecret, without bytes.Buffer
	printToken(&withSecret, tok, true)
	printToken(&without, tok, false)
	if !strings.Contains(withSecret.String(), "Secret ID     = "+tok.SecretID+"\n") {
		t.Fatalf("exp: aligned Secret ID line got: %q", withSecret.String())
	}
	if strings.Contains(without.String(), tok.SecretID) || strings.Contains(without.String(), "Secret ID") {
		t.Fatalf("exp: no secret got: %q", without.String())
	}
	for _, want := range []string{"Accessor ID   = acc-1\n", "Policies      = ops,read\n", "Type          = client\n", "Modify Index  = 7\n"} {
		if !strings.Contains(without.String(), want) {
			t.Fatalf("exp: %q in %q", want, without.String())
		}
	}
	var js bytes.Buffer
	if code := showToken(&js, &js, tok, true); code != 0 || strings.Contains(js.String(), tok.SecretID) || strings.Contains(js.String(), "secret_id") {
		t.Fatalf("showToken -json exp: no secret got: %d %q", code, js.String())
	}
	if tok.SecretID == "" {
		t.Fatal("exp: showToken leaves the caller's token alone got: secret blanked")
	}
}
