package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/claimd/claimd/integration/harness"
)

// jsonType is the header every state-changing request with a JSON body
// sends (curl's --data would say form-urlencoded, which the API refuses).
const jsonType = "Content-Type: application/json"

// curlResult is one curl run: the status, headers and body it got.
type curlResult struct {
	status int
	header map[string]string // lower-case names
	body   []byte
	stderr string
}

// curlCmd builds `curl` with the dev agent's CA and cli certificate, as a
// user would type it after sourcing dev.env. The headers and the body go
// to files in dir; stdout carries the status code.
func curlCmd(env map[string]string, dir string, args ...string) *exec.Cmd {
	base := []string{"-sS", "--max-time", "90",
		"--cacert", env["CLAIMD_CACERT"], "--cert", env["CLAIMD_CLIENT_CERT"], "--key", env["CLAIMD_CLIENT_KEY"],
		"-D", filepath.Join(dir, "headers"), "-o", filepath.Join(dir, "body"), "-w", "%{http_code}"}
	return exec.Command("curl", append(base, args...)...)
}

func readCurl(t *testing.T, cmd *exec.Cmd, dir string, stdout, stderr *bytes.Buffer) curlResult {
	t.Helper()
	r := curlResult{header: map[string]string{}, stderr: stderr.String()}
	r.status, _ = strconv.Atoi(strings.TrimSpace(stdout.String()))
	r.body, _ = os.ReadFile(filepath.Join(dir, "body"))
	h, _ := os.ReadFile(filepath.Join(dir, "headers"))
	sc := bufio.NewScanner(bytes.NewReader(h))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			r.header[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return r
}

// runCurl runs curl to completion.
func runCurl(t *testing.T, env map[string]string, args ...string) curlResult {
	t.Helper()
	dir := t.TempDir()
	cmd := curlCmd(env, dir, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	return readCurl(t, cmd, dir, &out, &errb)
}

func (r curlResult) String() string {
	return fmt.Sprintf("%d %v %s %s", r.status, r.header, bytes.TrimSpace(r.body), r.stderr)
}

// The HTTP API as a user meets it: a dev agent (mutual TLS and ACLs on),
// and curl with the files and token the agent printed. Register a volume,
// read it, watch it with a blocking query in the background while it is
// registered again, and ask the agent's health.
// startDevAgent runs `claimd agent -dev` with its HTTP API and returns the
// process, the CLI environment it printed, the API's URL and the token
// header (the test is skipped without curl).
func startDevAgent(t *testing.T) (dev *harness.Process, env map[string]string, url, token string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not on PATH (CI's .ci/run installs it)")
	}
	addr, httpAddr := harness.FreeAddr(t), harness.FreeAddr(t)
	dev = harness.StartProcess(t, "dev", "agent", "-dev", "-bind", addr, "-http-addr", httpAddr, "-raft-multiplier", "0.2")
	env = devEnv(t, dev)
	if !strings.Contains(dev.Output(), "claimd HTTP API: https://"+httpAddr) {
		t.Fatalf("dev agent exp: its HTTP API's URL got: %q", dev.Output())
	}
	return dev, env, "https://" + httpAddr, "X-Claimd-Token: " + env["CLAIMD_TOKEN"]
}

func TestHTTPAPI_CurlAgainstDevAgent(t *testing.T) {
	dev, env, url, token := startDevAgent(t)

	// Without a client certificate the handshake fails, as on the RPC port.
	out, err := exec.Command("curl", "-sS", "--max-time", "30", "--cacert", env["CLAIMD_CACERT"], url+"/v1/agent/health").CombinedOutput()
	if err == nil {
		t.Fatalf("curl without a client certificate exp: a failed handshake got: %s", out)
	}
	// Without the token: anonymous, denied.
	if r := runCurl(t, env, url+"/v1/volumes"); r.status != 403 || !bytes.Contains(r.body, []byte(`"permission_denied"`)) {
		t.Fatalf("no token exp: 403 permission_denied got: %s", r)
	}

	spec := filepath.Join(t.TempDir(), "volume.json")
	writeSpec(t, spec, `{"id": "pgdata", "name": "postgres data", "external_id": "pgdata", "plugin_id": "hostdir",
  "access_mode": "single-node-writer", "attachment_mode": "file-system", "secrets": {"token": "never-printed"}}`)
	r := runCurl(t, env, "-H", token, "-H", jsonType, "-X", "PUT", "--data-binary", "@"+spec, url+"/v1/volume/pgdata")
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"pgdata"`)) {
		t.Fatalf("register with curl exp: 200 got: %s", r)
	}
	r = runCurl(t, env, "-H", token, url+"/v1/volume/pgdata")
	var vol struct {
		ID, Name    string
		ModifyIndex uint64 `json:"modify_index"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &vol) != nil || vol.Name != "postgres data" || bytes.Contains(r.body, []byte("never-printed")) {
		t.Fatalf("read with curl exp: 200, the volume without its secret got: %s", r)
	}
	idx, err := strconv.ParseUint(r.header["x-claimd-index"], 10, 64)
	if err != nil || idx < vol.ModifyIndex {
		t.Fatalf("read exp: X-Claimd-Index >= %d got: %s", vol.ModifyIndex, r)
	}

	// What a page on another site can make a browser send is refused and
	// changes nothing, even with a token that could (a browser sends no
	// token cross-site; an agent whose anonymous policy writes, or without
	// ACLs, would take the request on its own): a form (curl's --data
	// without a type), text/plain, and JSON naming another origin.
	evil := filepath.Join(t.TempDir(), "evil.json")
	writeSpec(t, evil, `{"id": "pgdata", "name": "changed by another site", "external_id": "pgdata", "plugin_id": "hostdir",
  "access_mode": "single-node-writer", "attachment_mode": "file-system"}`)
	for _, c := range []struct {
		name   string
		args   []string
		status int
		names  string
	}{
		{"a form", []string{"--data-binary", "@" + evil}, 415, "Content-Type"},
		{"text/plain", []string{"-H", "Content-Type: text/plain", "--data-binary", "@" + evil}, 415, "Content-Type"},
		{"another site's origin", []string{"-H", jsonType, "-H", "Origin: https://evil.example", "--data-binary", "@" + evil}, 403, "Origin"},
	} {
		args := append([]string{"-H", token, "-X", "PUT"}, c.args...)
		r := runCurl(t, env, append(args, url+"/v1/volume/pgdata")...)
		if r.status != c.status || !bytes.Contains(r.body, []byte(c.names)) {
			t.Fatalf("%s exp: %d naming %s got: %s", c.name, c.status, c.names, r)
		}
	}
	if r := runCurl(t, env, "-H", token, url+"/v1/volume/pgdata"); r.status != 200 || !bytes.Contains(r.body, []byte(`"postgres data"`)) {
		t.Fatalf("volume after refused cross-site writes exp: unchanged got: %s", r)
	}

	// A blocking query in the background, answered when pgdata changes.
	dir := t.TempDir()
	watch := curlCmd(env, dir, "-H", token, fmt.Sprintf("%s/v1/volume/pgdata?index=%d&wait=60s", url, idx))
	var wout, werr bytes.Buffer
	watch.Stdout, watch.Stderr = &wout, &werr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- watch.Wait() }()
	t.Cleanup(func() { _ = watch.Process.Signal(syscall.SIGKILL) })

	writeSpec(t, spec, `{"id": "pgdata", "name": "postgres data v2", "external_id": "pgdata", "plugin_id": "hostdir",
  "access_mode": "single-node-writer", "attachment_mode": "file-system"}`)
	if r := runCurl(t, env, "-H", token, "-H", jsonType, "-X", "POST", "--data-binary", "@"+spec, url+"/v1/volumes"); r.status != 200 {
		t.Fatalf("re-register with curl exp: 200 got: %s", r)
	}
	select {
	case <-waited:
	case <-time.After(60 * time.Second):
		t.Fatalf("blocking query exp: an answer once pgdata changed got: none in 60s")
	}
	r = readCurl(t, watch, dir, &wout, &werr)
	next, _ := strconv.ParseUint(r.header["x-claimd-index"], 10, 64)
	if r.status != 200 || next <= idx || !bytes.Contains(r.body, []byte(`"postgres data v2"`)) {
		t.Fatalf("blocking query exp: 200, X-Claimd-Index > %d, the new name got: %s", idx, r)
	}

	// Health needs no token; the dev agent is both server and client.
	harness.WaitFor(t, 30*time.Second, func() error {
		r := runCurl(t, env, url+"/v1/agent/health")
		if r.status != 200 || !bytes.Contains(r.body, []byte(`"ok": true`)) || !bytes.Contains(r.body, []byte(`"role": "both"`)) {
			return fmt.Errorf("health exp: 200 ok, role both got: %s", r)
		}
		return nil
	})
	r = runCurl(t, env, url+"/v1/agent/self")
	if r.status != 200 || bytes.Contains(r.body, []byte(env["CLAIMD_TOKEN"])) || bytes.Contains(r.body, []byte("PRIVATE KEY")) {
		t.Fatalf("self exp: 200 without a token or key got: %s", r)
	}

	// Prometheus metrics, parsed with the Prometheus project's own text
	// parser: claimd's claim path and raft's commit time are there.
	r = runCurl(t, env, "-H", token, url+"/v1/metrics?format=prometheus")
	if r.status != 200 {
		t.Fatalf("metrics exp: 200 got: %s", r)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("metrics exp: Prometheus text got: %v", err)
	}
	for _, name := range []string{"claimd_raft_commitTime", "claimd_rpc_request"} {
		if _, ok := families[name]; !ok {
			t.Fatalf("metrics exp: %s got: %d families", name, len(families))
		}
	}
	if r := runCurl(t, env, url+"/v1/metrics"); r.status != 403 {
		t.Fatalf("metrics without a token exp: 403 got: %s", r)
	}

	// A snapshot taken with curl, then inspected by the CLI and over HTTP.
	snap := filepath.Join(t.TempDir(), "backup.snap")
	r = runCurl(t, env, "-H", token, url+"/v1/operator/snapshot")
	if r.status != 200 || r.header["x-claimd-index"] == "" {
		t.Fatalf("snapshot save with curl exp: 200 with X-Claimd-Index got: %d %v", r.status, r.header)
	}
	if err := os.WriteFile(snap, r.body, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := harness.RunCLI(t, "operator", "snapshot", "inspect", "-json", snap); res.Code != 0 || !strings.Contains(res.Stdout, `"volumes": 1`) {
		t.Fatalf("snapshot inspect exp: one volume got: %d %q %q", res.Code, res.Stdout, res.Stderr)
	}
	r = runCurl(t, env, "-H", "Content-Type: application/octet-stream", "-X", "POST", "--data-binary", "@"+snap, url+"/v1/operator/snapshot/inspect")
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"volumes": 1`)) {
		t.Fatalf("snapshot inspect over HTTP exp: 200, one volume got: %s", r)
	}

	if err := dev.Signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// The volume lifecycle routes with curl, as docs/http-api.md shows them:
// create, snapshot (twice: the same snapshot), list, create from the
// snapshot, expand (and a refused shrink), grow by register and by create
// again, delete the snapshot.
func TestHTTPAPI_CurlVolumeLifecycle(t *testing.T) {
	dev, env, url, token := startDevAgent(t)
	put := func(path, body string) curlResult {
		return runCurl(t, env, "-H", token, "-H", jsonType, "-X", "PUT", "--data", body, url+path)
	}
	caps := `"capabilities":[{"access_mode":"single-node-writer","attachment_mode":"file-system"}]`
	if r := put("/v1/volume/scratch/create", `{"plugin_id":"hostdir","capacity_min":1048576,`+caps+`}`); r.status != 200 {
		t.Fatalf("create exp: 200 got: %s", r)
	}
	var snap struct {
		ID             string `json:"id"`
		SourceVolumeID string `json:"source_volume_id"`
	}
	r := put("/v1/volume/scratch/snapshot", `{"name":"scratch-monday"}`)
	if r.status != 200 || json.Unmarshal(r.body, &snap) != nil || snap.ID == "" || snap.SourceVolumeID != "scratch" {
		t.Fatalf("snapshot exp: 200 with the snapshot of scratch got: %s", r)
	}
	if r := put("/v1/volume/scratch/snapshot", `{"name":"scratch-monday"}`); r.status != 200 || !bytes.Contains(r.body, []byte(snap.ID)) {
		t.Fatalf("repeated snapshot exp: 200, the same snapshot got: %s", r)
	}
	r = runCurl(t, env, "-H", token, url+"/v1/snapshots?plugin=hostdir")
	var list struct {
		Snapshots []struct {
			ID string `json:"id"`
		} `json:"snapshots"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap.ID {
		t.Fatalf("snapshot list exp: 200 with one snapshot got: %s", r)
	}
	if r := put("/v1/volume/restored/create", `{"plugin_id":"hostdir","snapshot_id":"`+snap.ID+`",`+caps+`}`); r.status != 200 {
		t.Fatalf("create from snapshot exp: 200 got: %s", r)
	}
	r = put("/v1/volume/restored/expand", `{"capacity":4194304}`)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"capacity": 4194304`)) || r.header["x-claimd-index"] == "" {
		t.Fatalf("expand exp: 200 with the capacity and an index got: %s", r)
	}
	if r := put("/v1/volume/restored/expand", `{"capacity":1024}`); r.status != 400 || !bytes.Contains(r.body, []byte("capacity")) {
		t.Fatalf("shrink exp: 400 naming capacity got: %s", r)
	}
	// Growing by register and by create again: the answers say so.
	reg := func(capacity string) curlResult {
		return put("/v1/volume/restored", `{"external_id":"restored","plugin_id":"hostdir","capacity":`+capacity+
			`,"access_mode":"single-node-writer","attachment_mode":"file-system"}`)
	}
	if r := reg("6291456"); r.status != 200 || !bytes.Contains(r.body, []byte(`"previous_capacity": 4194304`)) ||
		!bytes.Contains(r.body, []byte(`"capacity": 6291456`)) {
		t.Fatalf("register with a larger capacity exp: 200 with the volume grown from 4194304 to 6291456 got: %s", r)
	}
	if r := reg("1024"); r.status != 400 || !bytes.Contains(r.body, []byte("capacity")) || !bytes.Contains(r.body, []byte("shrinking")) {
		t.Fatalf("register with a smaller capacity exp: 400 naming capacity got: %s", r)
	}
	r = put("/v1/volume/scratch/create", `{"plugin_id":"hostdir","capacity_min":2097152,`+caps+`}`)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"expanded": {`)) || !bytes.Contains(r.body, []byte(`"previous_capacity": 1048576`)) ||
		!bytes.Contains(r.body, []byte(`"external_id": "scratch"`)) {
		t.Fatalf("create again with a larger capacity_min exp: 200, the volume and its growth got: %s", r)
	}
	if r := runCurl(t, env, "-H", token, "-X", "DELETE", url+"/v1/snapshot?plugin=hostdir&id="+snap.ID); r.status != 200 {
		t.Fatalf("snapshot delete exp: 200 got: %s", r)
	}
	if r := runCurl(t, env, "-H", token, url+"/v1/snapshots"); r.status != 200 || !bytes.Contains(r.body, []byte(`"snapshots": []`)) {
		t.Fatalf("snapshot list after delete exp: 200, none got: %s", r)
	}
	if err := dev.Signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// The web UI is in the agent's binary: the dev agent serves it at /ui/
// (and / sends the browser there) with the Content-Security-Policy, over
// the same mutual TLS as the API, with no token.
func TestHTTPAPI_CurlWebUIFromTheBinary(t *testing.T) {
	_, env, url, _ := startDevAgent(t)
	if r := runCurl(t, env, url+"/"); r.status != 302 || r.header["location"] != "/ui/" {
		t.Fatalf("GET / exp: 302 to /ui/ got: %s", r)
	}
	r := runCurl(t, env, url+"/ui/")
	if r.status != 200 || !bytes.Contains(r.body, []byte(`<script src="app.js"`)) ||
		!strings.Contains(r.header["content-security-policy"], "default-src 'none'") {
		t.Fatalf("GET /ui/ exp: 200, the page, a CSP got: %d %v", r.status, r.header)
	}
	if r := runCurl(t, env, url+"/ui/app.js"); r.status != 200 || !bytes.Contains(r.body, []byte("X-Claimd-Token")) {
		t.Fatalf("GET /ui/app.js exp: 200, the script got: %d", r.status)
	}
}

// devEnv waits for the dev agent's "source FILE" line and reads the CLI
// environment from FILE; the agent's output must not hold the token.
func devEnv(t *testing.T, dev *harness.Process) map[string]string {
	t.Helper()
	env := map[string]string{}
	harness.WaitFor(t, 30*time.Second, func() error {
		for _, line := range strings.Split(dev.Output(), "\n") {
			path, ok := strings.CutPrefix(strings.TrimSpace(line), "source ")
			if !ok {
				continue
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rest, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "export ")
			if !ok {
				return fmt.Errorf("%s exp: an export line got: %q", path, data)
			}
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			return nil
		}
		if dev.Exited() {
			t.Fatalf("dev agent exp: running got: exited\n%s", dev.Output())
		}
		return fmt.Errorf("dev agent exp: a source line got: %q", dev.Output())
	})
	// The messages never show the token itself, even when the test fails.
	if tok := env["CLAIMD_TOKEN"]; tok == "" {
		t.Fatalf("dev.env exp: CLAIMD_TOKEN got: none")
	} else if strings.Contains(dev.Output(), tok) {
		t.Fatalf("dev agent output exp: no management token (dev.env holds it) got: the token of dev.env in the output")
	}
	return env
}
