package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, body string
		code       int
		want       string
	}{
		{"ok.hcl", "data_dir = \"/var/lib/claimd\"\nserver {\n  enabled = true\n  bootstrap_expect = 3\n}\n", 0, "Configuration valid: server (bootstrap_expect 3); TLS off, ACLs off"},
		{"typo.hcl", "server {\n  enabled = true\n  bootstrap_expct = 3\n}\n", 1, `Did you mean "bootstrap_expect"?`},
		{"nomode.hcl", "log_level = \"info\"\n", 1, "neither server"},
		{"tls.hcl", "data_dir = \"/d\"\nserver {\n  enabled = true\n}\ntls {\n  ca_file = \"/nonexistent/ca.pem\"\n  cert_file = \"/nonexistent/c.pem\"\n  key_file = \"/nonexistent/k.pem\"\n}\n", 1, "tls: "},
		{"client.hcl", "client {\n  enabled = true\n}\n", 1, "client.servers"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run([]string{"config", "validate", write(c.name, c.body)}, &stdout, &stderr)
		if code != c.code || !strings.Contains(stdout.String()+stderr.String(), c.want) {
			t.Errorf("%s: exit %d, out %q, err %q; want exit %d with %q", c.name, code, stdout.String(), stderr.String(), c.code, c.want)
		}
	}
}
