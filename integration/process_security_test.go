package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// userShell runs claimd the way a user's shell would: in a working
// directory, with the CLAIMD_* variables the "Securing a cluster" section
// of docs/operations.md exports (and no others from the test's environment).
type userShell struct {
	t   *testing.T
	dir string
	env map[string]string
	// outputs collects every CLI output, checked for leaked secrets.
	outputs *[]string
}

func (sh userShell) with(k, v string) userShell {
	env := make(map[string]string, len(sh.env)+1)
	for ek, ev := range sh.env {
		env[ek] = ev
	}
	if v == "" {
		delete(env, k)
	} else {
		env[k] = v
	}
	sh.env = env
	return sh
}

func (sh userShell) run(args ...string) harness.CLIResult {
	sh.t.Helper()
	cmd := exec.Command(harness.Binary(sh.t), args...)
	cmd.Dir = sh.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CLAIMD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range sh.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		sh.t.Fatalf("run claimd %v: %v", args, err)
	}
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	_ = cmd.Wait()
	r := harness.CLIResult{Code: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String()}
	*sh.outputs = append(*sh.outputs, "claimd "+strings.Join(args, " ")+"\n"+r.Stdout+r.Stderr)
	return r
}

// must runs a command that has to succeed.
func (sh userShell) must(args ...string) string {
	sh.t.Helper()
	r := sh.run(args...)
	if r.Code != 0 {
		sh.t.Fatalf("claimd %s exp: exit 0 got: %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// mustJSON runs a command with -json output and decodes it.
func (sh userShell) mustJSON(v any, args ...string) {
	sh.t.Helper()
	out := sh.must(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		sh.t.Fatalf("claimd %s: decode %T: %v\n%s", strings.Join(args, " "), v, err, out)
	}
}

// tryJSON is mustJSON for a poll: a failed run (an election under way) is
// an error to retry, not the end of the test.
func (sh userShell) tryJSON(v any, args ...string) error {
	r := sh.run(args...)
	if r.Code != 0 {
		return fmt.Errorf("claimd %s: exit %d: %s", strings.Join(args, " "), r.Code, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
		return fmt.Errorf("claimd %s: decode %T: %v\n%s", strings.Join(args, " "), v, err, r.Stdout)
	}
	return nil
}

var secretLineRE = regexp.MustCompile(`(?m)^Secret ID\s+= (\S+)$`)
var secretIDFieldRE = regexp.MustCompile(`"secret_id":\s*"([^"]*)"`)
var accessorLineRE = regexp.MustCompile(`(?m)^Accessor ID\s+= (\S+)$`)

// tokenFromOutput takes the accessor and secret from `acl bootstrap` or
// `acl token create` output, as a user copies them from the terminal.
func tokenFromOutput(t *testing.T, out string) (accessor, secret string) {
	t.Helper()
	a, s := accessorLineRE.FindStringSubmatch(out), secretLineRE.FindStringSubmatch(out)
	if a == nil || s == nil {
		t.Fatalf("exp: Accessor ID and Secret ID lines got: %q", out)
	}
	return a[1], s[1]
}

// TestProcesses_SecureClusterAsInREADME follows the "Securing a cluster"
// section of docs/operations.md (once in the README) with real processes:
// certificates made with the CLI, three TLS+ACL servers, a client agent
// authenticated by its certificate and node secret, the CLI configured from
// the environment.
func TestProcesses_SecureClusterAsInREADME(t *testing.T) {
	dir := t.TempDir()
	var cliOutputs []string

	// 1. The CA and the certificates, made in one directory.
	pki := filepath.Join(dir, "claimd-pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	admin := userShell{t: t, dir: pki, env: map[string]string{}, outputs: &cliOutputs}
	admin.must("tls", "ca", "create")
	for range 3 {
		admin.must("tls", "cert", "create", "-server", "-additional-ipaddress", "127.0.0.1")
	}
	admin.must("tls", "cert", "create", "-client")
	admin.must("tls", "cert", "create", "-cli")
	for _, f := range []string{"claimd-agent-ca.pem", "global-server-claimd.pem", "global-server-claimd-1-key.pem",
		"global-server-claimd-2.pem", "global-client-claimd.pem", "global-cli-claimd-key.pem"} {
		if _, err := os.Stat(filepath.Join(pki, f)); err != nil {
			t.Fatalf("exp: %s written got: %v", f, err)
		}
	}
	ca := filepath.Join(pki, "claimd-agent-ca.pem")

	// 2. Three servers with TLS and ACLs.
	addrs := []string{harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)}
	var procs []*harness.Process
	for i, suffix := range []string{"", "-1", "-2"} {
		name := fmt.Sprintf("s%d", i+1)
		procs = append(procs, harness.StartProcess(t, name, "agent", "-server", "-bootstrap-expect", "3",
			"-data-dir", filepath.Join(dir, name), "-bind", addrs[i], "-join", harness.JoinOthers(addrs, i),
			"-node-name", name, "-raft-multiplier", "0.2", "-log-level", "debug",
			"-tls-ca-file", ca,
			"-tls-cert-file", filepath.Join(pki, "global-server-claimd"+suffix+".pem"),
			"-tls-key-file", filepath.Join(pki, "global-server-claimd"+suffix+"-key.pem"),
			"-acl-enabled"))
	}

	// 3. The CLI's environment, then the bootstrap token.
	sh := admin.with("CLAIMD_ADDR", strings.Join(addrs, ",")).
		with("CLAIMD_CACERT", ca).
		with("CLAIMD_CLIENT_CERT", filepath.Join(pki, "global-cli-claimd.pem")).
		with("CLAIMD_CLIENT_KEY", filepath.Join(pki, "global-cli-claimd-key.pem"))
	var bootOut string
	harness.WaitFor(t, 60*time.Second, func() error {
		r := sh.run("acl", "bootstrap", "-timeout", "15s")
		if r.Code == 0 {
			bootOut = r.Stdout
			return nil
		}
		if strings.Contains(r.Stderr, "already done") {
			// An earlier attempt was applied but its reply lost: the
			// token is gone, the test cannot go on.
			t.Fatalf("acl bootstrap exp: first call to succeed got: %s", r.Stderr)
		}
		return fmt.Errorf("acl bootstrap: exit %d: %s", r.Code, r.Stderr)
	})
	_, mgmtSecret := tokenFromOutput(t, bootOut)
	// A second bootstrap is refused and says how to reset.
	if r := sh.run("acl", "bootstrap"); r.Code != 1 || !strings.Contains(r.Stderr, "reset index") ||
		!strings.Contains(r.Stderr, "acl-bootstrap-reset") || strings.Contains(r.Stdout+r.Stderr, mgmtSecret) {
		t.Fatalf("second acl bootstrap exp: exit 1 naming the reset index and file got: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	mgmt := sh.with("CLAIMD_TOKEN", mgmtSecret)
	if out := mgmt.must("acl", "token", "self"); !strings.Contains(out, "Type          = management") || strings.Contains(out, mgmtSecret) {
		t.Fatalf("acl token self exp: the management token without its secret got: %q", out)
	}

	// 4. A client agent with the client certificate and no token, beside
	// the built-in plugin.
	sockDir, err := os.MkdirTemp("", "claimd-sock-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "hostdir.sock")
	plugin := harness.StartProcess(t, "plugin", "csi-plugin", "hostdir", "-endpoint", "unix://"+sock,
		"-root", filepath.Join(dir, "volumes"), "-node-id", "worker1", "-mode", "monolith", "-auto-create")
	clientData := filepath.Join(dir, "client")
	client := harness.StartProcess(t, "client", "agent", "-client", "-servers", strings.Join(addrs, ","),
		"-data-dir", clientData, "-node-name", "worker1", "-csi-plugin", "id=hostdir,type=monolith,socket="+sock,
		"-tls-ca-file", ca,
		"-tls-cert-file", filepath.Join(pki, "global-client-claimd.pem"),
		"-tls-key-file", filepath.Join(pki, "global-client-claimd-key.pem"),
		"-log-level", "debug")
	procs = append(procs, plugin, client)

	var nodeID string
	harness.WaitFor(t, 60*time.Second, func() error {
		var nodes []map[string]any
		if err := mgmt.tryJSON(&nodes, "node", "status", "-json"); err != nil {
			return err
		}
		if len(nodes) != 1 {
			return fmt.Errorf("nodes exp: 1 got: %d", len(nodes))
		}
		n := nodes[0]
		if n["status"] != string(structs.NodeStatusReady) {
			return fmt.Errorf("node exp: ready got: %v", n["status"])
		}
		// The client certificate registers the node, not its controller:
		// that waits for an operator (issue 38).
		if r := mgmt.run("plugin", "status", "-json", "hostdir"); r.Code != 0 || !strings.Contains(r.Stdout, `"controllers_pending": 1`) ||
			!strings.Contains(r.Stdout, `"controllers_healthy": 0`) {
			return fmt.Errorf("plugin hostdir exp: one controller pending admission got: %d %s %s", r.Code, r.Stdout, r.Stderr)
		}
		nodeID, _ = n["id"].(string)
		return nil
	})
	if out := mgmt.must("plugin", "status", "hostdir"); !strings.Contains(out, "Controllers Pending      1 (claimd plugin admit hostdir NODE)") {
		t.Fatalf("plugin status exp: the pending controller and the command that admits it got: %s", out)
	}
	if out := mgmt.must("plugin", "admit", "hostdir", nodeID); !strings.Contains(out, "admitted") {
		t.Fatalf("plugin admit exp: admitted got: %s", out)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		if r := mgmt.run("plugin", "status", "-json", "hostdir"); r.Code != 0 || !strings.Contains(r.Stdout, `"controllers_healthy": 1`) ||
			!strings.Contains(r.Stdout, `"source": "operator"`) {
			return fmt.Errorf("plugin hostdir exp: the controller admitted by the operator and healthy got: %d %s %s", r.Code, r.Stdout, r.Stderr)
		}
		return nil
	})
	var ident struct{ ID, Secret string }
	data, err := os.ReadFile(filepath.Join(clientData, "node-identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ident); err != nil || ident.Secret == "" || ident.ID != nodeID {
		t.Fatalf("node identity exp: node %s with a secret got: %+v %v", nodeID, ident, err)
	}
	// node status shows no secret_id value (at most a placeholder), in the
	// list or for one node.
	for _, args := range [][]string{{"node", "status", "-json"}, {"node", "status", "-json", nodeID}, {"node", "status", nodeID}} {
		out := mgmt.must(args...)
		if strings.Contains(out, ident.Secret) {
			t.Fatalf("claimd %s exp: no node secret got: %s", strings.Join(args, " "), out)
		}
		for _, m := range secretIDFieldRE.FindAllStringSubmatch(out, -1) {
			if m[1] != "" && m[1] != "<redacted>" {
				t.Fatalf("claimd %s exp: secret_id empty or redacted got: %q", strings.Join(args, " "), m[1])
			}
		}
	}

	// 5. A volume and an allocation that claims it.
	spec := filepath.Join(pki, "volume.json")
	writeSpec(t, spec, `{"id":"pgdata","name":"postgres data","external_id":"pgdata","plugin_id":"hostdir",
		"access_mode":"single-node-writer","attachment_mode":"file-system",
		"mount_options":{"fs_type":"ext4","mount_flags":["noatime"]},
		"parameters":{"tier":"fast"},"context":{},"secrets":{"token":"never-printed"}}`)
	mgmt.must("volume", "register", spec)
	mgmt.must("alloc", "run", "-node", nodeID, "-volume", "pgdata", "-id", "web1")
	harness.WaitFor(t, 60*time.Second, func() error {
		var a structs.Alloc
		if err := mgmt.tryJSON(&a, "alloc", "status", "-json", "web1"); err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("web1 exp: running got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
	var held structs.Volume
	mgmt.mustJSON(&held, "volume", "status", "-json", "pgdata")
	if len(held.WriteClaims) != 1 {
		t.Fatalf("pgdata exp: one write claim got: %+v", held.WriteClaims)
	}

	// 6. A read-only policy and a token with it.
	writeSpec(t, filepath.Join(pki, "volume-read.hcl"), "volume {\n  policy = \"read\"\n}\n")
	mgmt.must("acl", "policy", "apply", "-description", "read volumes", "volume-read", "volume-read.hcl")
	if out := mgmt.must("acl", "policy", "info", "volume-read"); !strings.Contains(out, `policy = "read"`) {
		t.Fatalf("acl policy info exp: the rules got: %q", out)
	}
	createOut := mgmt.must("acl", "token", "create", "-name", "reader", "-policy", "volume-read", "-ttl", "24h")
	readerAccessor, readerSecret := tokenFromOutput(t, createOut)
	for _, args := range [][]string{{"acl", "token", "list"}, {"acl", "token", "list", "-json"}, {"acl", "token", "info", readerAccessor},
		{"acl", "token", "info", "-json", readerAccessor}} {
		out := mgmt.must(args...)
		if !strings.Contains(out, readerAccessor) || strings.Contains(out, readerSecret) || strings.Contains(out, mgmtSecret) {
			t.Fatalf("claimd %s exp: the accessor and no secret got: %s", strings.Join(args, " "), out)
		}
	}
	reader := sh.with("CLAIMD_TOKEN", readerSecret)
	if out := reader.must("volume", "status", "pgdata"); !strings.Contains(out, "web1") {
		t.Fatalf("reader volume status exp: the claim of web1 got: %q", out)
	}
	r := reader.run("volume", "detach", "pgdata", nodeID)
	if r.Code != 1 || !strings.Contains(r.Stderr, "permission_denied") {
		t.Fatalf("reader volume detach exp: exit 1 permission_denied got: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := reader.run("acl", "token", "list"); r.Code != 1 || !strings.Contains(r.Stderr, "permission_denied") {
		t.Fatalf("reader acl token list exp: exit 1 permission_denied got: %d %q", r.Code, r.Stderr)
	}
	var after structs.Volume
	mgmt.mustJSON(&after, "volume", "status", "-json", "pgdata")
	if after.ModifyIndex != held.ModifyIndex || len(after.WriteClaims) != 1 || len(after.PastClaims) != 0 {
		t.Fatalf("after a denied detach exp: pgdata unchanged (index %d, 1 write claim) got: index %d, claims %+v past %+v",
			held.ModifyIndex, after.ModifyIndex, after.WriteClaims, after.PastClaims)
	}
	var web1 structs.Alloc
	mgmt.mustJSON(&web1, "alloc", "status", "-json", "web1")
	if web1.ClientStatus != structs.AllocClientRunning {
		t.Fatalf("after a denied detach exp: web1 running got: %s", web1.ClientStatus)
	}

	// The documented operator policy, taken from docs/operations.md itself,
	// and a token with it as the documentation makes it.
	writeSpec(t, filepath.Join(pki, "operator.hcl"), readmeOperatorPolicy(t))
	mgmt.must("acl", "policy", "apply", "-description", "day-to-day operations", "operator", "operator.hcl")
	_, aliceSecret := tokenFromOutput(t, mgmt.must("acl", "token", "create", "-name", "alice", "-policy", "operator", "-ttl", "720h"))
	alice := sh.with("CLAIMD_TOKEN", aliceSecret)
	for _, args := range [][]string{{"volume", "status", "pgdata"}, {"alloc", "status"}, {"node", "status"}, {"plugin", "status"},
		{"operator", "raft", "list-peers"}, {"eval", "list"}} {
		alice.must(args...)
	}
	for _, args := range [][]string{{"acl", "token", "list"}, {"operator", "raft", "transfer-leader"}} {
		if r := alice.run(args...); r.Code != 1 || !strings.Contains(r.Stderr, "permission_denied") {
			t.Fatalf("alice: claimd %s exp: exit 1 permission_denied got: %d %q", strings.Join(args, " "), r.Code, r.Stderr)
		}
	}

	// 7. Stop with the management token: the servers release the claim by
	// themselves (node detach on the client, controller detach), with no
	// user token involved.
	mgmt.must("alloc", "stop", "web1")
	harness.WaitFor(t, 60*time.Second, func() error {
		var v structs.Volume
		if err := mgmt.tryJSON(&v, "volume", "status", "-json", "pgdata"); err != nil {
			return err
		}
		if n := len(v.ReadClaims) + len(v.WriteClaims) + len(v.PastClaims); n != 0 {
			return fmt.Errorf("pgdata exp: no claims got: %d (write %v past %v)", n, v.WriteClaims, v.PastClaims)
		}
		var evals []structs.Eval
		if err := mgmt.tryJSON(&evals, "eval", "list", "-json", "-volume", "pgdata"); err != nil {
			return err
		}
		if len(evals) == 0 {
			return fmt.Errorf("pgdata exp: a GC eval got: none")
		}
		for _, e := range evals {
			if e.Status != structs.EvalStatusComplete {
				return fmt.Errorf("eval %s exp: complete got: %s", e.ID, e.Status)
			}
		}
		return nil
	})

	// 8. Without TLS the CLI is refused, with or without a token; with the
	// CA but no client certificate too.
	for _, plain := range []userShell{
		sh.with("CLAIMD_CACERT", "").with("CLAIMD_CLIENT_CERT", "").with("CLAIMD_CLIENT_KEY", "").with("CLAIMD_TOKEN", mgmtSecret),
		sh.with("CLAIMD_CACERT", "").with("CLAIMD_CLIENT_CERT", "").with("CLAIMD_CLIENT_KEY", ""),
		mgmt.with("CLAIMD_CLIENT_CERT", "").with("CLAIMD_CLIENT_KEY", ""),
	} {
		if r := plain.run("volume", "status", "-timeout", "5s"); r.Code != 1 || strings.Contains(r.Stdout, "pgdata") {
			t.Fatalf("CLI without TLS credentials exp: exit 1 and no answer got: %d %q %q", r.Code, r.Stdout, r.Stderr)
		}
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		for _, p := range procs[:3] {
			if strings.Contains(p.Output(), "plaintext connection refused") {
				return nil
			}
		}
		return fmt.Errorf("exp: a server logged the refused plaintext connection")
	})

	// 9. No token or node secret in any process's output or the CLI's
	// (except the one time bootstrap and create show them).
	secrets := map[string]string{"management token": mgmtSecret, "reader token": readerSecret, "alice's token": aliceSecret,
		"node secret": ident.Secret}
	for _, p := range procs {
		for what, s := range secrets {
			if strings.Contains(p.Output(), s) {
				t.Fatalf("%s exp: no %s in its output got: it is there", p.Name, what)
			}
		}
	}
	for _, out := range cliOutputs {
		if strings.HasPrefix(out, "claimd acl bootstrap") || strings.HasPrefix(out, "claimd acl token create") {
			continue
		}
		for what, s := range secrets {
			if strings.Contains(out, s) {
				t.Fatalf("exp: no %s in CLI output got:\n%s", what, out)
			}
		}
	}
}

// readmeOperatorPolicy returns the HCL policy of the "Securing a cluster"
// section of docs/operations.md (moved there from the README), so that the
// example the documentation gives is the one tested.
func readmeOperatorPolicy(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Securing a cluster\n")
	if !ok {
		t.Fatal("docs/operations.md exp: a section \"Securing a cluster\" got: none")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```hcl\n")
	if !ok {
		t.Fatal("docs/operations.md \"Securing a cluster\" exp: an hcl block got: none")
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok || !strings.Contains(block, "volume {") {
		t.Fatalf("docs/operations.md exp: an operator policy got: %q", block)
	}
	return block
}
