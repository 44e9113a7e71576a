package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/claimd/claimd/tlsutil"
)

// runConfigValidate is `claimd config validate PATH...`: load agent
// configuration files and directories as `claimd agent -config` would and
// check what can be checked without starting anything (the keys and their
// values, the mode, the TLS files), so that a change can be checked before
// `systemctl reload` or a restart. Nothing is bound or written.
func runConfigValidate(args []string, stdout, stderr io.Writer) int {
	x := newCmd("config validate", stdout, stderr)
	pos, ok := x.parse(args, atLeast(1, "usage: claimd config validate FILE|DIR ..."))
	if !ok {
		return 1
	}
	var f agentFlags
	fs := newFlagSet("agent", io.Discard)
	defineAgentFlags(fs, &f)
	if _, err := loadAgentConfig(fs, &f, pos); err != nil {
		return x.fail("%v", err)
	}
	var problems []string
	if !f.server && !f.client {
		problems = append(problems, "neither server { enabled = true } nor client { enabled = true }: the agent would not start")
	}
	if f.server && f.dataDir == "" {
		problems = append(problems, "data_dir: a server needs one")
	}
	if f.client && f.servers == "" && !f.server {
		problems = append(problems, "client.servers: a client agent needs the servers' addresses")
	}
	if err := hostNames(splitList(f.httpHosts)); err != nil {
		problems = append(problems, fmt.Sprintf("http_allowed_hosts: %v", err))
	}
	if f.tls.Enabled() {
		if _, err := tlsutil.NewConfigurator(f.tls); err != nil {
			problems = append(problems, fmt.Sprintf("tls: %v", err))
		}
	} else if f.tlsAllowPlain {
		problems = append(problems, "tls: allow_plaintext needs ca_file, cert_file and key_file")
	}
	if len(problems) > 0 {
		return x.fail("%s", errors.New(strings.Join(problems, "\n  ")))
	}
	var roles []string
	if f.server {
		roles = append(roles, fmt.Sprintf("server (bootstrap_expect %d)", f.bootstrapExpect))
	}
	if f.client {
		roles = append(roles, fmt.Sprintf("client agent (%d plugins, node_lease %s)", len(f.plugins), f.nodeLease))
	}
	fmt.Fprintf(stdout, "Configuration valid: %s; TLS %s, ACLs %s\n", strings.Join(roles, " and "), onOff(f.tls.Enabled()), onOff(f.aclEnabled))
	return 0
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
