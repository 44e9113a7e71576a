package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The sample configurations (packaging/config) and docs/operations.md
// disagreed: certificates in /etc/claimd/tls in one and /etc/claimd in the
// other, leave_on_terminate on in the docs and off in the sample, an acl
// block in the client sample that a client ignores. Every certificate path
// in either is under /etc/claimd/tls, with a name `claimd tls` writes;
// the docs' server example keeps leave_on_terminate as the sample does;
// neither client configuration has an acl block.
func TestDocs_SampleConfigurationsAgreeWithOperationsGuide(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	guide := read("../../docs/operations.md")
	server := read("../../packaging/config/server/server.hcl")
	client := read("../../packaging/config/client/client.hcl")

	pem := regexp.MustCompile(`/etc/claimd/[A-Za-z0-9_./-]*\.pem`)
	name := regexp.MustCompile(`^/etc/claimd/tls/(claimd-agent-ca|global-(server|client|cli)-claimd(-[0-9]+)?)(-key)?\.pem$`)
	for what, text := range map[string]string{"docs/operations.md": guide, "server.hcl": server, "client.hcl": client} {
		for _, p := range pem.FindAllString(text, -1) {
			if !name.MatchString(p) {
				t.Errorf("%s: certificate path %s exp: /etc/claimd/tls/<a name claimd tls writes>", what, p)
			}
		}
	}
	leave := regexp.MustCompile(`leave_on_terminate\s*=\s*(true|false)`)
	want := leave.FindStringSubmatch(server)
	if want == nil {
		t.Fatal("server.hcl: no leave_on_terminate")
	}
	for _, m := range leave.FindAllStringSubmatch(guide, -1) {
		if m[1] != want[1] {
			t.Errorf("operations.md: leave_on_terminate = %s exp: %s as in packaging/config/server/server.hcl", m[1], want[1])
		}
	}
	if strings.Contains(client, "\nacl {") {
		t.Error("client.hcl: an acl block (a client agent does not check ACLs)")
	}
	i := strings.Index(guide, "A client agent on a worker")
	if i < 0 {
		t.Fatal("operations.md: no client configuration example")
	}
	example := guide[i:]
	example = example[:strings.Index(example, "```\n\n")]
	if strings.Contains(example, "\nacl {") {
		t.Error("operations.md: the client example has an acl block")
	}
}

// Every verb of the command table has a row in operations.md's CLI table
// (volume create, snapshot, node drain and bench were missing).
func TestDocs_EveryCommandIsInTheOperationsCLITable(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	guide := string(b)
	start := strings.Index(guide, "\n## CLI\n")
	if start < 0 {
		t.Fatal("operations.md: no CLI section")
	}
	section := guide[start+1:]
	section = section[:strings.Index(section, "\n## ")]
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `claimd ") {
			rows = append(rows, line)
		}
	}
	for _, v := range verbs() {
		full, group, last := strings.Join(v, " "), strings.Join(v[:len(v)-1], " "), v[len(v)-1]
		found := false
		for _, r := range rows {
			if strings.Contains(r, "`claimd "+full+" ") || strings.Contains(r, "`claimd "+full+"`") ||
				(strings.Contains(r, "`claimd "+group+" ") && (strings.Contains(r, "/ `"+last+" ") || strings.Contains(r, "/ `"+last+"`"))) {
				found = true
			}
		}
		if !found {
			t.Errorf("operations.md's CLI table has no row for `claimd %s`", full)
		}
	}
}
