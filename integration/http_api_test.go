package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/httpapi"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/telemetry"
	"github.com/claimd/claimd/tlsutil"
)

// httpEnv is a secured three-server cluster with an HTTP API in front of
// each server, as each server agent would run it.
type httpEnv struct {
	c     *harness.Cluster
	mgmt  string // management token
	apis  map[string]*httpapi.Server
	hc    *http.Client
	addrs []string
}

func newHTTPEnv(t *testing.T) *httpEnv {
	t.Helper()
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	c.WaitForLeader(electionWait)
	e := &httpEnv{c: c, mgmt: c.ManagementToken(), apis: map[string]*httpapi.Server{}}
	tel, err := telemetry.Setup(telemetry.Config{ServiceName: "claimd", DisableHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers {
		e.addrs = append(e.addrs, s.Addr)
		e.apis[s.Name] = startHTTPAPI(t, httpapi.Config{
			TLS: c.PKI().Configurator(t, tlsutil.RoleServer), RPCAddrs: []string{s.Addr},
			Dialer: c.Net.Dialer(s.Name), Server: s.Server(), Metrics: tel.Handler(),
		})
	}
	// What curl does with the CLI's files: the CA, the cli certificate as
	// the client certificate, and the URL's host (127.0.0.1, which every
	// agent certificate names) checked in the agent's certificate.
	tlsCfg := c.PKI().CLIConfig(t).Clone()
	tlsCfg.ServerName = ""
	e.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 60 * time.Second}
	t.Cleanup(e.hc.CloseIdleConnections)
	return e
}

func startHTTPAPI(t *testing.T, cfg httpapi.Config) *httpapi.Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	h, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown() })
	return h
}

// follower is a server that does not lead now: what it answers, it
// forwards.
func (e *httpEnv) follower(t *testing.T) *harness.TestServer {
	t.Helper()
	e.c.WaitForLeader(electionWait)
	return e.c.Followers()[0]
}

// httpResp is one answer, read whole.
type httpResp struct {
	status int
	header http.Header
	body   []byte
	req    string
}

func (r httpResp) String() string {
	return fmt.Sprintf("%s: %d %s", r.req, r.status, bytes.TrimSpace(r.body))
}

// index is the X-Claimd-Index header.
func (r httpResp) index(t *testing.T) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(r.header.Get(httpapi.IndexHeader), 10, 64)
	if err != nil {
		t.Fatalf("%s: %s exp: a number got: %q", r.req, httpapi.IndexHeader, r.header.Get(httpapi.IndexHeader))
	}
	return n
}

// decode unmarshals the body into v.
func (r httpResp) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%s: body exp: JSON got: %v", r, err)
	}
}

// code is an error answer's "code".
func (r httpResp) code(t *testing.T) string {
	t.Helper()
	var e struct{ Error, Code string }
	r.decode(t, &e)
	if e.Error == "" || e.Code == "" {
		t.Fatalf("%s: exp: an error body {\"error\", \"code\"} got none", r)
	}
	return e.Code
}

func (e *httpEnv) do(t *testing.T, h *httpapi.Server, method, path, token, body string) httpResp {
	t.Helper()
	r, err := e.try(h, method, path, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *httpEnv) try(h *httpapi.Server, method, path, token, body string) (httpResp, error) {
	req, err := http.NewRequest(method, h.URL()+path, strings.NewReader(body))
	if err != nil {
		return httpResp{}, err
	}
	if token != "" {
		req.Header.Set(httpapi.TokenHeader, token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return httpResp{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpResp{status: resp.StatusCode, header: resp.Header, body: b, req: method + " " + path}, err
}

// expect fails unless the answer has the status (and, for an error, code).
func expect(t *testing.T, r httpResp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s exp: %d got: %s", r.req, status, r)
	}
	if code != "" {
		if got := r.code(t); got != code {
			t.Fatalf("%s exp: code %s got: %s", r.req, code, r)
		}
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s Content-Type exp: application/json got: %q", r.req, ct)
	}
}

// limitedToken makes a token whose one policy holds rules.
func (e *httpEnv) limitedToken(t *testing.T, name, rules string) string {
	t.Helper()
	ctx := harness.Ctx(t, 30*time.Second)
	mgmt := e.c.Servers[0].Client()
	if _, err := mgmt.ACLPolicyApply(ctx, name, "", rules); err != nil {
		t.Fatal(err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx, name, "", []string{name}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

const volumeSpec = `{"id": %q, "name": %q, "external_id": "ext-%[1]s", "plugin_id": "hostdir",
  "access_mode": "single-node-writer", "attachment_mode": "file-system",
  "parameters": {"tier": "fast"}, "secrets": {"token": "never-shown"}}`

// Every route family through a follower of a cluster with mutual TLS and
// ACLs: status codes, JSON shapes, 403 for a limited token, 404, 400.
func TestHTTPAPI_RoutesThroughFollower(t *testing.T) {
	e := newHTTPEnv(t)
	reader := e.limitedToken(t, "http-volume-read", `volume { policy = "read" }`)
	t.Run("volumes", func(t *testing.T) { testHTTPVolumes(t, e, reader) })
	t.Run("allocs nodes plugins evals", func(t *testing.T) { testHTTPAllocs(t, e, reader) })
	t.Run("blocking queries", func(t *testing.T) { testHTTPBlocking(t, e) })
	t.Run("acl", func(t *testing.T) { testHTTPACL(t, e) })
	t.Run("status operator system", func(t *testing.T) { testHTTPOperator(t, e, reader) })
	t.Run("client agent", func(t *testing.T) { testHTTPClientAgent(t, e) })
	t.Run("server health", func(t *testing.T) { testHTTPServerHealth(t, e) })
	// Last: it ends with a restore, which replaces the cluster's state.
	t.Run("metrics raft health snapshots", func(t *testing.T) { testHTTPMetricsHealthSnapshots(t, e, reader) })
}

func testHTTPMetricsHealthSnapshots(t *testing.T, e *httpEnv, reader string) {
	f := e.apis[e.follower(t).Name]
	// Metrics need operator:read, checked by the servers.
	if r := e.do(t, f, "GET", "/v1/metrics", "", ""); r.status != 403 {
		t.Fatalf("metrics anonymous exp: 403 got: %s", r)
	}
	if r := e.do(t, f, "GET", "/v1/metrics", reader, ""); r.status != 403 {
		t.Fatalf("metrics with volume:read exp: 403 got: %s", r)
	}
	r := e.do(t, f, "GET", "/v1/metrics?format=prometheus", e.mgmt, "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics exp: 200 Prometheus text got: %d %v", r.status, r.header)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("metrics exp: Prometheus text got: %v", err)
	}
	if _, ok := families["claimd_raft_commitTime"]; !ok {
		t.Fatalf("metrics exp: raft's commit time got: %d families", len(families))
	}
	// What Prometheus sends (authorization: credentials_file): the token
	// as a Bearer credential, on this route as on every other.
	for _, c := range []struct {
		name, header, extra string
		status              int
		body                string
	}{
		{"bearer", "Bearer " + e.mgmt, "", 200, ""},
		{"bearer without the management token", "Bearer " + reader, "", 403, ""},
		{"basic", "Basic dXNlcjpwYXNz", "", 400, "Authorization"},
		{"two different tokens", "Bearer " + e.mgmt, reader, 400, "two different tokens"},
	} {
		req, err := http.NewRequest("GET", f.URL()+"/v1/metrics?format=prometheus", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", c.header)
		if c.extra != "" {
			req.Header.Set(httpapi.TokenHeader, c.extra)
		}
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatalf("metrics, %s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.body) {
			t.Fatalf("metrics, %s: exp %d %q got: %d %s", c.name, c.status, c.body, resp.StatusCode, b)
		}
		if strings.Contains(string(b), e.mgmt) {
			t.Fatalf("metrics, %s: the answer repeats the token", c.name)
		}
	}

	// Raft health: every server healthy once autopilot has heard from all.
	if r := e.do(t, f, "GET", "/v1/operator/raft/health", reader, ""); r.status != 403 {
		t.Fatalf("raft health with volume:read exp: 403 got: %s", r)
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		r := e.do(t, f, "GET", "/v1/operator/raft/health", e.mgmt, "")
		var h struct {
			Healthy bool
			Servers []json.RawMessage
		}
		if r.status != 200 || json.Unmarshal(r.body, &h) != nil || !h.Healthy || len(h.Servers) != 3 {
			return fmt.Errorf("raft health exp: 200, 3 healthy servers got: %s", r)
		}
		return nil
	})

	// Snapshots: a management token only (the archive holds every secret).
	if r := e.do(t, f, "GET", "/v1/operator/snapshot", reader, ""); r.status != 403 {
		t.Fatalf("snapshot with volume:read exp: 403 got: %s", r)
	}
	r = e.do(t, f, "GET", "/v1/operator/snapshot", e.mgmt, "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/gzip" || r.header.Get(httpapi.IndexHeader) == "" {
		t.Fatalf("snapshot through a follower exp: 200 gzip archive with an index got: %d %v", r.status, r.header)
	}
	archive := r.body
	ins := e.do(t, f, "POST", "/v1/operator/snapshot/inspect", "", string(archive))
	var counts struct {
		Tables map[string]int `json:"tables"`
	}
	ins.decode(t, &counts)
	if counts.Tables["volumes"] == 0 || counts.Tables["acl_tokens"] == 0 {
		t.Fatalf("inspect exp: volumes and tokens counted got: %s", ins)
	}
	// A corrupt archive is refused before anything changes.
	before := e.c.Leader().Server().Raft().LastIndex()
	bad := append([]byte(nil), archive...)
	bad[len(bad)/2] ^= 0xff
	if r := e.do(t, f, "PUT", "/v1/operator/snapshot", e.mgmt, string(bad)); r.status < 400 || r.status == 403 {
		t.Fatalf("restore of a corrupt archive exp: refused got: %s", r)
	}
	if after := e.c.Leader().Server().Raft().LastIndex(); after != before {
		t.Fatalf("refused restore exp: no Raft entry got: last index %d -> %d", before, after)
	}
	// The archive itself restores (through a follower) and every server
	// converges on its state.
	r = e.do(t, f, "PUT", "/v1/operator/snapshot", e.mgmt, string(archive))
	expect(t, r, 200, "")
	harness.WaitFor(t, 30*time.Second, func() error {
		var digests []string
		for _, s := range e.c.Servers {
			d, err := s.Client().StateDigest(harness.Ctx(t, 10*time.Second))
			if err != nil {
				return err
			}
			digests = append(digests, d.SHA256)
		}
		if digests[0] == "" || digests[0] != digests[1] || digests[1] != digests[2] {
			return fmt.Errorf("digests after the restore exp: equal got: %v", digests)
		}
		return nil
	})
}

func testHTTPVolumes(t *testing.T, e *httpEnv, reader string) {
	f := e.apis[e.follower(t).Name]
	r := e.do(t, f, "PUT", "/v1/volume/hv1", e.mgmt, fmt.Sprintf(volumeSpec, "hv1", "first"))
	expect(t, r, 200, "")
	var reg struct {
		Index   uint64
		Volumes []string
	}
	r.decode(t, &reg)
	if reg.Index == 0 || r.index(t) != reg.Index || len(reg.Volumes) != 1 || reg.Volumes[0] != "hv1" {
		t.Fatalf("register exp: index in body and header, volumes [hv1] got: %s", r)
	}
	// One spec or an array, as `claimd volume register` reads a file.
	r = e.do(t, f, "POST", "/v1/volumes", e.mgmt, "["+fmt.Sprintf(volumeSpec, "hv2", "second")+","+fmt.Sprintf(volumeSpec, "hv3", "third")+"]")
	expect(t, r, 200, "")

	r = e.do(t, f, "GET", "/v1/volume/hv1", e.mgmt, "")
	expect(t, r, 200, "")
	var vol map[string]any
	r.decode(t, &vol)
	for _, k := range []string{"id", "name", "external_id", "plugin_id", "access_mode", "attachment_mode", "parameters", "secrets", "create_index", "modify_index"} {
		if _, ok := vol[k]; !ok {
			t.Errorf("volume JSON exp: key %q (the CLI's -json names) got: %s", k, r.body)
		}
	}
	if bytes.Contains(r.body, []byte("never-shown")) || !bytes.Contains(r.body, []byte("redacted")) {
		t.Fatalf("volume JSON exp: secret values redacted got: %s", r.body)
	}
	if r.index(t) < reg.Index || r.header.Get(httpapi.KnownLeaderHeader) != "true" || r.header.Get(httpapi.LastContactHeader) == "" {
		t.Fatalf("read meta headers exp: index >= %d, known leader, last contact got: %v", reg.Index, r.header)
	}
	r = e.do(t, f, "GET", "/v1/volumes", reader, "")
	expect(t, r, 200, "")
	var vols []structs.Volume
	r.decode(t, &vols)
	if len(vols) != 3 || vols[0].ID != "hv1" || vols[2].Name != "third" {
		t.Fatalf("volume list exp: hv1 hv2 hv3 got: %s", r)
	}

	// Denied: a read-only token registering, no token at all reading.
	expect(t, e.do(t, f, "PUT", "/v1/volume/hv4", reader, fmt.Sprintf(volumeSpec, "hv4", "x")), 403, "permission_denied")
	expect(t, e.do(t, f, "GET", "/v1/volumes", "", ""), 403, "permission_denied")
	expect(t, e.do(t, f, "DELETE", "/v1/volume/hv3", reader, ""), 403, "permission_denied")
	// Missing, and bad specs: the servers' validation, named.
	expect(t, e.do(t, f, "GET", "/v1/volume/nope", e.mgmt, ""), 404, "not_found")
	r = e.do(t, f, "PUT", "/v1/volume/hv4", e.mgmt, `{"external_id":"e","plugin_id":"hostdir","access_mode":"everyone","attachment_mode":"file-system"}`)
	expect(t, r, 400, "invalid")
	if !bytes.Contains(r.body, []byte("access_mode")) {
		t.Fatalf("bad access mode exp: the error names access_mode got: %s", r)
	}
	r = e.do(t, f, "POST", "/v1/volumes", e.mgmt, `{"id":"hv4","externalid":"e"}`)
	expect(t, r, 400, "invalid")
	if !bytes.Contains(r.body, []byte("externalid")) {
		t.Fatalf("unknown field exp: the error names it got: %s", r)
	}
	expect(t, e.do(t, f, "POST", "/v1/volume/hv1/detach", e.mgmt, ""), 400, "invalid") // no ?node=
	expect(t, e.do(t, f, "POST", "/v1/volume/hv1/detach?node=no-such-node", e.mgmt, ""), 404, "not_found")

	r = e.do(t, f, "DELETE", "/v1/volume/hv3", e.mgmt, "")
	expect(t, r, 200, "")
	if r.index(t) <= reg.Index {
		t.Fatalf("deregister exp: a newer index than %d got: %s", reg.Index, r)
	}
	expect(t, e.do(t, f, "GET", "/v1/volume/hv3", e.mgmt, ""), 404, "not_found")
	expect(t, e.do(t, f, "DELETE", "/v1/volume/hv3?force", e.mgmt, ""), 404, "not_found")
}

func testHTTPAllocs(t *testing.T, e *httpEnv, reader string) {
	f := e.apis[e.follower(t).Name]
	plug := harness.StartPlugin(t, "hw1", hostdir.ModeMonolith, filepath.Join(t.TempDir(), "storage"))
	agent := e.c.StartClient("hw1", e.addrs, plug.Config())
	node := agent.NodeID()
	// Its controller waits for an admission (issue 38), given over HTTP:
	// plugin:write, a node named.
	harness.WaitFor(t, applyWait, func() error {
		r, err := e.try(f, "GET", "/v1/plugin/hostdir", e.mgmt, "")
		if err != nil {
			return err
		}
		var p structs.Plugin
		if r.status != 200 || json.Unmarshal(r.body, &p) != nil || p.Controllers[node] == nil || p.ControllersPending != 1 {
			return fmt.Errorf("plugin hostdir exp: hw1's controller pending got: %s", r)
		}
		return nil
	})
	expect(t, e.do(t, f, "POST", "/v1/plugin/hostdir/admit?node="+node, reader, ""), 403, "permission_denied")
	expect(t, e.do(t, f, "POST", "/v1/plugin/hostdir/admit", e.mgmt, ""), 400, "invalid")
	r := e.do(t, f, "POST", "/v1/plugin/hostdir/admit?node="+node, e.mgmt, "")
	expect(t, r, 200, "")
	var admitted struct{ Admitted bool }
	if r.decode(t, &admitted); !admitted.Admitted {
		t.Fatalf("admit exp: admitted got: %s", r)
	}
	harness.WaitFor(t, applyWait, func() error {
		r, err := e.try(f, "GET", "/v1/plugin/hostdir", e.mgmt, "")
		if err != nil {
			return err
		}
		var p structs.Plugin
		if r.status != 200 || json.Unmarshal(r.body, &p) != nil || p.NodesHealthy < 1 || p.ControllersHealthy < 1 ||
			p.Admissions[node] == nil || p.Admissions[node].Source != structs.AdmittedByOperator {
			return fmt.Errorf("plugin hostdir exp: a healthy node and admitted controller got: %s", r)
		}
		return nil
	})
	expect(t, e.do(t, f, "PUT", "/v1/volume/ha1", e.mgmt, fmt.Sprintf(volumeSpec, "ha1", "a")), 200, "")
	expect(t, e.do(t, f, "PUT", "/v1/volume/ha2", e.mgmt, fmt.Sprintf(volumeSpec, "ha2", "b")), 200, "")

	// No id: made up, as `claimd alloc run` does.
	r = e.do(t, f, "POST", "/v1/allocs", e.mgmt, fmt.Sprintf(`{"node_id": %q, "volumes": [{"volume_id": "ha1"}]}`, node))
	expect(t, r, 200, "")
	var placed struct {
		Index  uint64
		Allocs []string
	}
	r.decode(t, &placed)
	if len(placed.Allocs) != 1 || placed.Allocs[0] == "" || placed.Index == 0 {
		t.Fatalf("place exp: one new alloc ID and an index got: %s", r)
	}
	a1 := placed.Allocs[0]
	expect(t, e.do(t, f, "PUT", "/v1/allocs", e.mgmt, fmt.Sprintf(`[{"id": "hb1", "node_id": %q, "volumes": [{"volume_id": "ha2"}]}]`, node)), 200, "")
	for _, id := range []string{a1, "hb1"} {
		harness.WaitFor(t, applyWait, func() error {
			r, err := e.try(f, "GET", "/v1/alloc/"+id, e.mgmt, "")
			if err != nil {
				return err
			}
			var a structs.Alloc
			if r.status != 200 || json.Unmarshal(r.body, &a) != nil || a.ClientStatus != structs.AllocClientRunning {
				return fmt.Errorf("alloc %s exp: running got: %s", id, r)
			}
			return nil
		})
	}
	r = e.do(t, f, "GET", "/v1/allocs?node="+node, e.mgmt, "")
	expect(t, r, 200, "")
	var allocs []map[string]any
	r.decode(t, &allocs)
	if len(allocs) != 2 || allocs[0]["node_id"] != node || allocs[0]["desired_status"] != "run" || allocs[0]["volumes"] == nil {
		t.Fatalf("alloc list exp: two allocs of %s with the CLI's JSON names got: %s", node, r)
	}
	expect(t, e.do(t, f, "GET", "/v1/allocs?node=nobody", e.mgmt, ""), 200, "")
	expect(t, e.do(t, f, "GET", "/v1/alloc/nope", e.mgmt, ""), 404, "not_found")
	expect(t, e.do(t, f, "GET", "/v1/allocs", reader, ""), 403, "permission_denied")
	expect(t, e.do(t, f, "POST", "/v1/allocs", reader, fmt.Sprintf(`{"node_id": %q}`, node)), 403, "permission_denied")
	r = e.do(t, f, "POST", "/v1/allocs", e.mgmt, `{"id": "bad id!", "node_id": "n"}`)
	expect(t, r, 400, "invalid")

	// Nodes: the node's secret never shows.
	secret := nodeSecret(t, agent.DataDir)
	r = e.do(t, f, "GET", "/v1/nodes", e.mgmt, "")
	expect(t, r, 200, "")
	var nodes []structs.Node
	r.decode(t, &nodes)
	if len(nodes) != 1 || nodes[0].ID != node || nodes[0].Status != structs.NodeStatusReady || bytes.Contains(r.body, []byte(secret)) {
		t.Fatalf("node list exp: %s ready, without its secret got: %s", node, r)
	}
	r = e.do(t, f, "GET", "/v1/node/"+node, e.mgmt, "")
	expect(t, r, 200, "")
	if bytes.Contains(r.body, []byte(secret)) || !bytes.Contains(r.body, []byte(`"csi_node_plugins"`)) {
		t.Fatalf("node exp: fingerprints, no secret got: %s", r)
	}
	expect(t, e.do(t, f, "GET", "/v1/node/nope", e.mgmt, ""), 404, "not_found")
	expect(t, e.do(t, f, "GET", "/v1/nodes", reader, ""), 403, "permission_denied")
	// Plugins.
	r = e.do(t, f, "GET", "/v1/plugins", e.mgmt, "")
	expect(t, r, 200, "")
	if !bytes.Contains(r.body, []byte(`"id": "hostdir"`)) || !bytes.Contains(r.body, []byte(`"nodes_healthy"`)) {
		t.Fatalf("plugin list exp: hostdir got: %s", r)
	}
	expect(t, e.do(t, f, "GET", "/v1/plugin/nope", e.mgmt, ""), 404, "not_found")
	expect(t, e.do(t, f, "GET", "/v1/plugins", reader, ""), 403, "permission_denied")

	// Detach: the node's claim on ha2 is released now.
	r = e.do(t, f, "POST", "/v1/volume/ha2/detach?node="+node, e.mgmt, "")
	expect(t, r, 200, "")
	var det struct {
		Released, Forced []string
		Index            uint64
	}
	r.decode(t, &det)
	if len(det.Released) != 1 || det.Released[0] != "hb1" || det.Forced == nil || det.Index == 0 {
		t.Fatalf("detach exp: released [hb1], forced [] got: %s", r)
	}
	expect(t, e.do(t, f, "POST", "/v1/volume/ha2/detach?node="+node, reader, ""), 403, "permission_denied")

	// Stop: the release becomes an eval, which completes.
	expect(t, e.do(t, f, "POST", "/v1/alloc/"+a1+"/stop", reader, ""), 403, "permission_denied")
	r = e.do(t, f, "POST", "/v1/alloc/"+a1+"/stop", e.mgmt, "")
	expect(t, r, 200, "")
	var evalID string
	harness.WaitFor(t, applyWait, func() error {
		r, err := e.try(f, "GET", "/v1/evals?volume=ha1&status=complete", e.mgmt, "")
		if err != nil {
			return err
		}
		var evals []structs.Eval
		if r.status != 200 || json.Unmarshal(r.body, &evals) != nil || len(evals) == 0 {
			return fmt.Errorf("evals of ha1 exp: a complete one got: %s", r)
		}
		evalID = evals[0].ID
		return nil
	})
	r = e.do(t, f, "GET", "/v1/eval/"+evalID, reader, "")
	expect(t, r, 200, "")
	var ev map[string]any
	r.decode(t, &ev)
	if ev["id"] != evalID || ev["volume_id"] != "ha1" || ev["status"] != "complete" || ev["type"] == nil {
		t.Fatalf("eval exp: %s of ha1, complete got: %s", evalID, r)
	}
	expect(t, e.do(t, f, "GET", "/v1/eval/nope", e.mgmt, ""), 404, "not_found")
	expect(t, e.do(t, f, "GET", "/v1/evals?volumes=ha1", e.mgmt, ""), 400, "invalid")
}

// nodeSecret reads a client agent's node secret from its data dir.
func nodeSecret(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "node-identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct{ Secret string }
	if err := json.Unmarshal(b, &id); err != nil || id.Secret == "" {
		t.Fatalf("node identity exp: a secret got: %s %v", b, err)
	}
	return id.Secret
}

// A blocking query on a follower returns when what it reads changes, with
// a higher X-Claimd-Index; without a change it answers after its wait.
func testHTTPBlocking(t *testing.T, e *httpEnv) {
	fs := e.c.Followers()
	f1, f2 := e.apis[fs[0].Name], e.apis[fs[len(fs)-1].Name]
	expect(t, e.do(t, f2, "PUT", "/v1/volume/hq1", e.mgmt, fmt.Sprintf(volumeSpec, "hq1", "before")), 200, "")
	r := e.do(t, f1, "GET", "/v1/volume/hq1", e.mgmt, "")
	expect(t, r, 200, "")
	idx := r.index(t)

	done := make(chan httpResp, 1)
	errs := make(chan error, 1)
	go func() {
		r, err := e.try(f1, "GET", fmt.Sprintf("/v1/volume/hq1?index=%d&wait=30s", idx), e.mgmt, "")
		if err != nil {
			errs <- err
			return
		}
		done <- r
	}()
	// The change, through the other follower.
	expect(t, e.do(t, f2, "PUT", "/v1/volume/hq1", e.mgmt, fmt.Sprintf(volumeSpec, "hq1", "after")), 200, "")
	select {
	case r := <-done:
		expect(t, r, 200, "")
		var v structs.Volume
		r.decode(t, &v)
		if r.index(t) <= idx || v.ModifyIndex <= idx || v.Name != "after" {
			t.Fatalf("blocking query exp: index > %d and the new name got: index %d %s", idx, r.index(t), r)
		}
		idx = r.index(t)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatalf("blocking query exp: an answer when hq1 changed got: none in 30s")
	}

	// Nothing changes: the answer comes after the wait, same index.
	start := time.Now()
	r = e.do(t, f1, "GET", fmt.Sprintf("/v1/volume/hq1?index=%d&wait=300ms", idx), e.mgmt, "")
	expect(t, r, 200, "")
	if el := time.Since(start); el < 300*time.Millisecond || r.index(t) != idx {
		t.Fatalf("blocking query without a change exp: after >= 300ms, index %d got: after %s, index %d", idx, el, r.index(t))
	}
	// A stale read from the follower itself.
	r = e.do(t, f1, "GET", "/v1/volumes?stale", e.mgmt, "")
	expect(t, r, 200, "")
	if r.header.Get(httpapi.KnownLeaderHeader) != "true" {
		t.Fatalf("stale read exp: known leader got: %v", r.header)
	}
	expect(t, e.do(t, f1, "GET", "/v1/volumes?index=1&wait=forever", e.mgmt, ""), 400, "invalid")
}

func testHTTPACL(t *testing.T, e *httpEnv) {
	f := e.apis[e.follower(t).Name]
	// Bootstrapped already (by the harness): a conflict naming the reset index.
	r := e.do(t, f, "POST", "/v1/acl/bootstrap", "", "")
	expect(t, r, 409, "conflict")
	if !bytes.Contains(r.body, []byte("reset index")) {
		t.Fatalf("second bootstrap exp: the reset index got: %s", r)
	}
	policy := `{"description": "reads volumes", "rules": "volume {\n  policy = \"read\"\n}\n"}`
	r = e.do(t, f, "PUT", "/v1/acl/policy/hvr", e.mgmt, policy)
	expect(t, r, 200, "")
	if r.index(t) == 0 {
		t.Fatalf("policy apply exp: an index got: %s", r)
	}
	r = e.do(t, f, "GET", "/v1/acl/policy/hvr", e.mgmt, "")
	expect(t, r, 200, "")
	var p structs.ACLPolicy
	r.decode(t, &p)
	if p.Name != "hvr" || p.Description != "reads volumes" || !strings.Contains(p.Rules, `policy = "read"`) {
		t.Fatalf("policy exp: hvr with its rules got: %s", r)
	}
	r = e.do(t, f, "GET", "/v1/acl/policies", e.mgmt, "")
	expect(t, r, 200, "")
	if !bytes.Contains(r.body, []byte(`"name": "hvr"`)) {
		t.Fatalf("policy list exp: hvr got: %s", r)
	}
	r = e.do(t, f, "PUT", "/v1/acl/policy/bad", e.mgmt, `{"rules": "volume { capabilities = [\"teleport\"] }"}`)
	expect(t, r, 400, "invalid")
	if !bytes.Contains(r.body, []byte("teleport")) {
		t.Fatalf("bad rules exp: the error names the capability got: %s", r)
	}

	r = e.do(t, f, "POST", "/v1/acl/token", e.mgmt, `{"name": "http-reader", "policies": ["hvr"], "ttl": "1h"}`)
	expect(t, r, 200, "")
	var tok structs.ACLToken
	r.decode(t, &tok)
	if tok.SecretID == "" || tok.AccessorID == "" || tok.Type != structs.ACLTokenClient || tok.ExpirationTime == nil {
		t.Fatalf("token create exp: a client token with its secret and an expiry got: %s", r)
	}
	for _, path := range []string{"/v1/acl/token/" + tok.AccessorID, "/v1/acl/tokens"} {
		r = e.do(t, f, "GET", path, e.mgmt, "")
		expect(t, r, 200, "")
		if !bytes.Contains(r.body, []byte(tok.AccessorID)) || bytes.Contains(r.body, []byte(tok.SecretID)) || bytes.Contains(r.body, []byte(e.mgmt)) {
			t.Fatalf("%s exp: the token without any secret got: %s", path, r)
		}
	}
	r = e.do(t, f, "GET", "/v1/acl/token/self", tok.SecretID, "")
	expect(t, r, 200, "")
	var self structs.ACLToken
	r.decode(t, &self)
	if self.AccessorID != tok.AccessorID || self.SecretID != "" {
		t.Fatalf("token self exp: %s without its secret got: %s", tok.AccessorID, r)
	}
	expect(t, e.do(t, f, "GET", "/v1/volumes", tok.SecretID, ""), 200, "")
	expect(t, e.do(t, f, "GET", "/v1/acl/policies", tok.SecretID, ""), 403, "permission_denied")
	expect(t, e.do(t, f, "POST", "/v1/acl/token", tok.SecretID, `{"name": "x", "type": "management"}`), 403, "permission_denied")
	expect(t, e.do(t, f, "GET", "/v1/acl/token/self", "", ""), 403, "permission_denied")
	expect(t, e.do(t, f, "GET", "/v1/acl/token/no-such-accessor", e.mgmt, ""), 404, "not_found")
	expect(t, e.do(t, f, "POST", "/v1/acl/token", e.mgmt, `{"name": "x", "policies": ["no-such-policy"]}`), 400, "invalid")

	expect(t, e.do(t, f, "DELETE", "/v1/acl/token/"+tok.AccessorID, e.mgmt, ""), 200, "")
	expect(t, e.do(t, f, "GET", "/v1/acl/token/self", tok.SecretID, ""), 403, "permission_denied")
	expect(t, e.do(t, f, "DELETE", "/v1/acl/policy/hvr", e.mgmt, ""), 200, "")
	expect(t, e.do(t, f, "GET", "/v1/acl/policy/hvr", e.mgmt, ""), 404, "not_found")
}

func testHTTPOperator(t *testing.T, e *httpEnv, reader string) {
	fs := e.follower(t)
	f := e.apis[fs.Name]
	leader := e.c.Leader()
	// Status needs no token.
	r := e.do(t, f, "GET", "/v1/status/leader", "", "")
	expect(t, r, 200, "")
	var addr string
	r.decode(t, &addr)
	if leader == nil || addr != leader.Addr {
		t.Fatalf("status leader exp: %v got: %s", leader, r)
	}
	r = e.do(t, f, "GET", "/v1/status/peers", "", "")
	expect(t, r, 200, "")
	var peers []string
	r.decode(t, &peers)
	if len(peers) != 3 {
		t.Fatalf("status peers exp: 3 got: %s", r)
	}

	for _, path := range []string{"/v1/operator/raft/configuration", "/v1/operator/raft/configuration?stale"} {
		r = e.do(t, f, "GET", path, e.mgmt, "")
		expect(t, r, 200, "")
		var conf struct {
			Servers []struct {
				ID, Node, Address, Version string
				Leader, Voter              bool
			}
		}
		r.decode(t, &conf)
		if strings.Contains(string(r.body), `"index"`) {
			t.Fatalf("%s exp: no index (the Raft library gives none) got: %s", path, r)
		}
		leaders := 0
		for _, s := range conf.Servers {
			if s.Leader {
				leaders++
			}
		}
		if len(conf.Servers) != 3 || leaders != 1 || conf.Servers[0].ID == "" || !conf.Servers[0].Voter {
			t.Fatalf("%s exp: 3 voters, one leader got: %s", path, r)
		}
	}
	expect(t, e.do(t, f, "GET", "/v1/operator/raft/configuration", reader, ""), 403, "permission_denied")
	expect(t, e.do(t, f, "DELETE", "/v1/operator/raft/peer", e.mgmt, ""), 400, "invalid")
	expect(t, e.do(t, f, "DELETE", "/v1/operator/raft/peer?id=no-such-server", e.mgmt, ""), 404, "not_found")
	expect(t, e.do(t, f, "DELETE", "/v1/operator/raft/peer?id=no-such-server", reader, ""), 403, "permission_denied")

	r = e.do(t, f, "PUT", "/v1/system/gc", e.mgmt, "")
	expect(t, r, 200, "")
	if !bytes.Contains(r.body, []byte(`"evals_created"`)) {
		t.Fatalf("system gc exp: evals_created got: %s", r)
	}
	expect(t, e.do(t, f, "POST", "/v1/system/gc", reader, ""), 403, "permission_denied")
	r = e.do(t, f, "GET", "/v1/system/release-status", e.mgmt, "")
	expect(t, r, 200, "")
	var rs map[string]any
	r.decode(t, &rs)

	// Leadership to this follower, asked of this follower.
	expect(t, e.do(t, f, "POST", "/v1/operator/raft/transfer-leader?id="+fs.Server().ID(), reader, ""), 403, "permission_denied")
	harness.WaitFor(t, electionWait, func() error {
		if fs.IsLeader() {
			return nil
		}
		r, err := e.try(f, "POST", "/v1/operator/raft/transfer-leader?id="+fs.Server().ID(), e.mgmt, "")
		if err != nil {
			return err
		}
		if r.status != 200 || !fs.IsLeader() {
			return fmt.Errorf("transfer leadership to %s exp: it leads got: %s", fs.Name, r)
		}
		return nil
	})
}

// A client agent's API: its reads go to its servers with its client
// certificate; its health follows its server session and its plugins.
func testHTTPClientAgent(t *testing.T, e *httpEnv) {
	plug := harness.StartPlugin(t, "hc1", hostdir.ModeMonolith, filepath.Join(t.TempDir(), "storage"))
	pki := e.c.PKI()
	newAgent := func(name string, servers []string, plugins ...csi.PluginConfig) *httpapi.Server {
		tlsConf := pki.Configurator(t, tlsutil.RoleClient)
		a, err := client.New(client.Config{Servers: servers, DataDir: filepath.Join(t.TempDir(), name), NodeName: name,
			Plugins: plugins, ProbeInterval: 200 * time.Millisecond, TLS: tlsConf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Shutdown)
		return startHTTPAPI(t, httpapi.Config{TLS: tlsConf, RPCAddrs: servers, Client: a})
	}
	h := newAgent("hc1", e.addrs, plug.Config())
	health := func(wantStatus int, want string) {
		t.Helper()
		harness.WaitFor(t, applyWait, func() error {
			r, err := e.try(h, "GET", "/v1/agent/health", "", "")
			if err != nil {
				return err
			}
			if r.status != wantStatus || !bytes.Contains(r.body, []byte(want)) {
				return fmt.Errorf("client health exp: %d with %q got: %s", wantStatus, want, r)
			}
			return nil
		})
	}
	health(200, `"server_session": true`)
	r := e.do(t, h, "GET", "/v1/agent/health", "", "")
	var hb struct {
		OK     bool
		Role   string
		Server *struct{}
		Client struct {
			OK            bool
			ServerSession bool `json:"server_session"`
			Plugins       map[string]struct{ Healthy bool }
		}
	}
	r.decode(t, &hb)
	if !hb.OK || hb.Role != "client" || hb.Server != nil || !hb.Client.OK || !hb.Client.Plugins["hostdir"].Healthy {
		t.Fatalf("client health exp: ok, role client, plugin hostdir healthy got: %s", r)
	}
	r = e.do(t, h, "GET", "/v1/agent/self", "", "")
	expect(t, r, 200, "")
	if !bytes.Contains(r.body, []byte(`"role": "client"`)) {
		t.Fatalf("client self exp: role client got: %s", r)
	}
	// Through the client agent's API: its servers answer, with the token.
	expect(t, e.do(t, h, "GET", "/v1/volumes", e.mgmt, ""), 200, "")
	expect(t, e.do(t, h, "GET", "/v1/volumes", "", ""), 403, "permission_denied")

	plug.Stop()
	health(503, `plugin \"hostdir\" unhealthy`)
	plug.Start()
	health(200, `"ok": true`)

	// An agent whose servers do not answer has no session.
	lone := newAgent("hc2", []string{harness.FreeAddr(t)})
	r = e.do(t, lone, "GET", "/v1/agent/health", "", "")
	expect(t, r, 503, "")
	if !bytes.Contains(r.body, []byte("no server session")) {
		t.Fatalf("health without servers exp: 503 no server session got: %s", r)
	}
	expect(t, e.do(t, lone, "GET", "/v1/volumes", e.mgmt, ""), 503, "unavailable")
}

// A server's health follows its view of the leader.
func testHTTPServerHealth(t *testing.T, e *httpEnv) {
	e.c.WaitForLeader(electionWait)
	for _, s := range e.c.Servers {
		r := e.do(t, e.apis[s.Name], "GET", "/v1/agent/health", "", "")
		expect(t, r, 200, "")
		var h struct {
			OK     bool
			Role   string
			Server struct {
				OK           bool
				RaftState    string `json:"raft_state"`
				Leader       string
				CommitIndex  uint64 `json:"commit_index"`
				AppliedIndex uint64 `json:"applied_index"`
			}
		}
		r.decode(t, &h)
		if !h.OK || h.Role != "server" || !h.Server.OK || h.Server.Leader == "" || h.Server.CommitIndex == 0 {
			t.Fatalf("%s health exp: ok with a leader got: %s", s.Name, r)
		}
		r = e.do(t, e.apis[s.Name], "GET", "/v1/agent/self", "", "")
		expect(t, r, 200, "")
		var self httpapi.Self
		r.decode(t, &self)
		if self.Role != "server" || self.Version == "" {
			t.Fatalf("%s self exp: role server and a version got: %s", s.Name, r)
		}
	}
	// Cut off from the others, a follower loses its leader.
	f := e.follower(t)
	e.c.Net.Isolate(f.Name)
	harness.WaitFor(t, electionWait, func() error {
		r, err := e.try(e.apis[f.Name], "GET", "/v1/agent/health", "", "")
		if err != nil {
			return err
		}
		if r.status != 503 || !bytes.Contains(r.body, []byte("no known leader")) {
			return fmt.Errorf("isolated %s health exp: 503 no known leader got: %s", f.Name, r)
		}
		return nil
	})
	e.c.Net.Heal()
	harness.WaitFor(t, electionWait, func() error {
		r, err := e.try(e.apis[f.Name], "GET", "/v1/agent/health", "", "")
		if err != nil {
			return err
		}
		if r.status != 200 {
			return fmt.Errorf("healed %s health exp: 200 got: %s", f.Name, r)
		}
		return nil
	})
}
